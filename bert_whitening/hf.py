"""Hugging Face BERT directories (``config.json``, ``model.safetensors``, ``vocab.txt``).

`google_variables` renames the safetensors tensors to google-research/bert variable names
(linear weights are stored ``(out, in)`` by PyTorch and ``(in, out)`` by TensorFlow, so they are
transposed); `convert_hf` writes the result as a Google-format checkpoint directory that
bert4keras loads. Reading needs numpy and ``safetensors`` only, no PyTorch.
"""
import json
import os
import re

from bert_whitening.checkpoints import CheckpointError

CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
               "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")

_RENAMES = [
    (r"embeddings\.(word|position|token_type)_embeddings\.weight", r"embeddings/\1_embeddings"),
    (r"(.*)LayerNorm\.weight", r"\1LayerNorm/gamma"),
    (r"(.*)LayerNorm\.bias", r"\1LayerNorm/beta"),
    (r"(.*)\.weight", r"\1/kernel"),
    (r"(.*)\.bias", r"\1/bias"),
]


def is_hf_directory(directory):
    return os.path.isfile(os.path.join(directory, "config.json"))


def google_name(name):
    """``encoder.layer.0.attention.self.query.weight`` -> ``bert/encoder/layer_0/attention/self/query/kernel``."""
    name = re.sub(r"^bert\.", "", name)
    for pattern, replacement in _RENAMES:
        if re.fullmatch(pattern, name):
            name = re.sub(pattern, replacement, name)
            break
    name = re.sub(r"encoder\.layer\.(\d+)\.", r"encoder/layer_\1/", name)
    return "bert/" + name.replace(".", "/")


def google_variables(tensors):
    """Google-named arrays from Hugging Face BertModel tensors (heads and buffers dropped)."""
    variables = {}
    for name, value in tensors.items():
        bare = re.sub(r"^bert\.", "", name)
        if not bare.startswith(("embeddings.", "encoder.", "pooler.")) or "position_ids" in bare:
            continue
        google = google_name(name)
        variables[google] = value.T if google.endswith("/kernel") else value
    return variables


def read_hf(directory):
    """``(bert_config, variables, vocab_tokens)`` of a Hugging Face BERT directory."""
    from safetensors.numpy import load_file

    paths = {name: os.path.join(directory, name)
             for name in ("config.json", "model.safetensors", "vocab.txt")}
    for name, path in paths.items():
        if not os.path.isfile(path):
            extra = (" (only pytorch_model.bin is there: convert it to safetensors first)"
                     if name == "model.safetensors"
                     and os.path.isfile(os.path.join(directory, "pytorch_model.bin")) else "")
            raise CheckpointError("missing %s%s; a Hugging Face BERT directory needs config.json, "
                                  "model.safetensors and vocab.txt" % (path, extra))
    with open(paths["config.json"], encoding="utf-8") as stream:
        hf_config = json.load(stream)
    if hf_config.get("model_type") != "bert":
        raise CheckpointError("%s: model_type %r is not supported; only BERT (model_type "
                              "\"bert\") checkpoints are" % (paths["config.json"],
                                                             hf_config.get("model_type")))
    config = {key: hf_config[key] for key in CONFIG_KEYS if key in hf_config}
    with open(paths["vocab.txt"], encoding="utf-8") as stream:
        vocab = stream.read().splitlines()
    return config, google_variables(load_file(paths["model.safetensors"])), vocab


def convert_hf(hf_directory, output_directory):
    """Write the Hugging Face BERT in ``hf_directory`` as a Google-format checkpoint directory."""
    from bert_whitening.checkpoints import write_checkpoint

    config, variables, vocab = read_hf(hf_directory)
    write_checkpoint(output_directory, config, variables, vocab)
    return output_directory

"""Hugging Face BERT directories (``config.json``, ``model.safetensors``, ``vocab.txt``).

`google_variables` renames the safetensors tensors to google-research/bert variable names
(linear weights are stored ``(out, in)`` by PyTorch and ``(in, out)`` by TensorFlow, so they are
transposed); `convert_hf` writes the result as a Google-format checkpoint directory that
bert4keras loads. Reading needs numpy and ``safetensors`` only, no PyTorch.
"""

import os
import re

from bert_whitening.bounded import VOCAB_BYTES
from bert_whitening.checkpoints import CheckpointError, check_file, read_bytes, read_json

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
)

_RENAMES = [
    (r"embeddings\.(word|position|token_type)_embeddings\.weight", r"embeddings/\1_embeddings"),
    (r"(.*)LayerNorm\.weight", r"\1LayerNorm/gamma"),
    (r"(.*)LayerNorm\.bias", r"\1LayerNorm/beta"),
    (r"(.*)\.weight", r"\1/kernel"),
    (r"(.*)\.bias", r"\1/bias"),
]


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


def read(directory):
    """``(bert_config, weights_path, load)`` of a Hugging Face BERT directory; ``load()`` reads
    the tensors as Google-named arrays."""
    config_path = os.path.join(directory, CONFIG)
    weights_path = os.path.join(directory, WEIGHTS)
    hf_config = read_json(config_path)
    if hf_config.get("model_type") != "bert":
        raise CheckpointError(
            "%s: model_type %r is not supported; only BERT checkpoints "
            '(model_type "bert") are' % (config_path, hf_config.get("model_type"))
        )
    if not os.path.isfile(weights_path):
        only_bin = os.path.isfile(os.path.join(directory, "pytorch_model.bin"))
        raise CheckpointError(
            "missing %s%s; a Hugging Face BERT directory needs config.json, model.safetensors "
            "and vocab.txt"
            % (
                weights_path,
                " (there is only pytorch_model.bin: save the model with safe_serialization=True)" if only_bin else "",
            )
        )
    check_file(weights_path)
    config = {key: hf_config[key] for key in CONFIG_KEYS if key in hf_config}
    return config, weights_path, lambda: google_variables(_load_tensors(weights_path))


def _load_tensors(path):
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except Exception as error:  # safetensors raises its own SafetensorError (not importable here)
        raise CheckpointError(
            "%s: cannot read the tensors (%s): the file is truncated or not safetensors" % (path, error)
        ) from None


def convert_hf(hf_directory, output_directory):
    """Write the Hugging Face BERT in ``hf_directory`` as a new Google-format checkpoint
    directory, all at once: staged beside it and renamed into place, so a failure leaves none."""
    from bert_whitening.atomic import DIRECTORY, check_outputs, staged_directory
    from bert_whitening.checkpoints.google import write_checkpoint
    from bert_whitening.errors import BertWhiteningError

    check_outputs([(output_directory, DIRECTORY)], [hf_directory])
    if os.path.lexists(output_directory):
        raise BertWhiteningError("%s already exists; choose a new directory" % output_directory)
    config, _, load = read(hf_directory)
    vocab = read_bytes(os.path.join(hf_directory, "vocab.txt"), VOCAB_BYTES).decode("utf-8").splitlines()
    with staged_directory(output_directory) as staging:
        write_checkpoint(staging, config, load(), vocab)
        os.rename(staging, output_directory)
    return output_directory

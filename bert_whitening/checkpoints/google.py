"""Google-format checkpoint directories (google-research/bert): read their files, write them."""

import glob
import json
import os

from bert_whitening.bounded import INDEX_BYTES
from bert_whitening.checkpoints import CheckpointError, check_file, read_json

CONFIG = "bert_config.json"
CHECKPOINT = "bert_model.ckpt"


#: The ``hidden_act`` values bert4keras builds: Keras' element-wise activations and its own GELUs
#: (``gelu`` is the erf one). Any other failed deep in the model's build, with a traceback.
ACTIVATIONS = ("gelu", "gelu_erf", "gelu_tanh", "relu", "relu6", "leaky_relu", "elu", "selu", "linear", "tanh") + (
    "sigmoid",
    "hard_sigmoid",
    "swish",
    "silu",
    "mish",
    "softplus",
    "softsign",
    "exponential",
)


def read(directory):
    """``(config, prefix, load)``: the configuration, the checkpoint prefix, and a function giving
    that prefix (the files are checked to exist now; bert4keras reads the variables when the
    model is built)."""
    config_path = os.path.join(directory, CONFIG)
    config = read_json(config_path)
    if config.get("hidden_act") not in ACTIVATIONS:
        raise CheckpointError(
            "%s: hidden_act is %r, not an activation bert4keras builds (%s)"
            % (config_path, config.get("hidden_act"), ", ".join(ACTIVATIONS))
        )
    prefix = checkpoint_prefix(directory)
    return config, prefix, lambda: prefix


def variable_shapes(prefix):
    """Variable name -> shape of a checkpoint, from its index file alone (TensorFlow is imported
    here only)."""
    from bert_whitening.backend import tf

    try:
        return {name: tuple(shape) for name, shape in tf.train.list_variables(prefix)}
    except tf.errors.OpError as error:
        raise CheckpointError(
            "%s: cannot read the checkpoint index (%s)" % (prefix + ".index", error.message.splitlines()[0])
        ) from None


def checkpoint_prefix(directory):
    """``bert_model.ckpt`` when present, else the one checkpoint the directory holds (NEZHA's
    release is ``model.ckpt-N``)."""
    indexes = sorted(glob.glob(os.path.join(directory, "*.ckpt*.index")))
    preferred = os.path.join(directory, CHECKPOINT + ".index")
    if preferred in indexes:
        indexes = [preferred]
    if not indexes:
        raise CheckpointError(
            "%s holds no checkpoint: expected bert_model.ckpt.index and bert_model.ckpt.data-00000-of-00001" % directory
        )
    if len(indexes) > 1:
        raise CheckpointError(
            "%s holds several checkpoints (%s); keep one" % (directory, ", ".join(os.path.basename(i) for i in indexes))
        )
    prefix = indexes[0][: -len(".index")]
    check_file(indexes[0], INDEX_BYTES)  # TensorFlow allocates the blocks its index claims
    for path in glob.glob(prefix + ".data-*") or [prefix + ".data-00000-of-00001"]:
        check_file(path)
    return prefix


def write_checkpoint(directory, config, variables, vocab):
    """Write a Google-format directory: ``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*``.

    ``variables`` maps google-research/bert variable names to numpy arrays; ``vocab`` is the
    token list, or the bytes of a checked ``vocab.txt`` (`ModelFiles.vocab_bytes`), written as
    they are (a model's identity records their sha256). TensorFlow is imported here only, so
    reading checkpoints needs none of it.
    """
    from bert_whitening.backend import tf

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as stream:
        json.dump(config, stream, indent=2)
    if not isinstance(vocab, bytes):
        vocab = "".join(token + "\n" for token in vocab).encode("utf-8")
    with open(os.path.join(directory, "vocab.txt"), "wb") as stream:
        stream.write(vocab)
    names = sorted(variables)
    tf.raw_ops.SaveV2(
        prefix=os.path.join(directory, CHECKPOINT),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(variables[name]) for name in names],
    )

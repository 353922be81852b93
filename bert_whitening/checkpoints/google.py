"""Google-format checkpoint directories (google-research/bert): read their files, write them."""

import fnmatch
import json
import math
import os
import re

from bert_whitening.checkpoints import CheckpointError, read_json
from bert_whitening.io.bounded import INDEX_BYTES, first_few

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


def read(opened):
    """``(config, prefix, files)`` of the directory ``opened`` (an `OpenedDirectory`): the
    configuration, the checkpoint prefix, and the names of its index and data files, opened now
    (the variables are read from those descriptors when the model is built)."""
    config_path = opened.join(CONFIG)
    config = read_json(config_path, opened.fd)
    if config.get("hidden_act") not in ACTIVATIONS:
        raise CheckpointError(
            "%s: hidden_act is %r, not an activation bert4keras builds (%s)"
            % (config_path, config.get("hidden_act"), ", ".join(ACTIVATIONS))
        )
    names = checkpoint_files(opened)
    return config, opened.join(names[0][: -len(".index")]), names


def checkpoint_reader(files):
    """TensorFlow's reader of the checkpoint of the `ModelFiles` ``files``, reading the files
    opened when they were checked (through `OpenedDirectory.linked`), whatever their names hold
    now."""
    from bert_whitening.backend import tf

    links = files.opened.linked(files.weight_names)
    return tf.train.load_checkpoint(os.path.join(links, os.path.basename(files.weights_path)))


def variable_reader(files):
    """name -> array of the checkpoint of ``files``, each variable read when it is asked for
    (TensorFlow's reader, imported when the checkpoint is opened)."""
    return checkpoint_reader(files).get_tensor


def variable_shapes(files):
    """Variable name -> shape of the checkpoint of ``files``, from its index file alone
    (TensorFlow is imported here only), once its data files are known to hold what the index
    gives them (`_check_data`): the checks before a build trust these shapes, and a build sized
    by an index whose data was never written (one row of each variable, an emptied data file)
    allocated the whole model before the first read failed."""
    from bert_whitening.backend import tf

    try:
        reader = checkpoint_reader(files)
        shapes = {name: tuple(shape) for name, shape in sorted(reader.get_variable_to_shape_map().items())}
        element_bytes = {name: dtype.size for name, dtype in reader.get_variable_to_dtype_map().items()}
        sliced = _sliced_elements(reader.debug_string())
    except tf.errors.OpError as error:
        raise CheckpointError(
            "%s: cannot read the checkpoint index (%s)"
            % (files.weight_files[0], files.opened.named(error.message.splitlines()[0]))
        ) from None
    _check_data(files, shapes, element_bytes, sliced)
    return shapes


#: An entry of a variable saved as slices in the reader's ``debug_string`` (one line per entry
#: of the index, the entries that list slices left out): the variable's name as TensorFlow's
#: ``EncodeTensorNameSlice`` keys it (a 0 byte, the name with 0 and 255 bytes escaped, ``\x00\x01``,
#: the slice's bounds), then `` (DT_...) [the slice's shape]``.
_SLICE_ENTRY = re.compile(rb"\x00((?:[^\x00]|\x00\xff)+)\x00\x01[\s\S]*? \(DT_\w+\) \[([\d,]*)\]\n")


def _sliced_elements(debug_string):
    """Variable name -> elements its slices hold, for each variable saved as slices (a
    partitioned variable, or a forged checkpoint that saves one row of each)."""
    held = {}
    for key, shape in _SLICE_ENTRY.findall(debug_string):
        name = key.replace(b"\x00\xff", b"\x00").replace(b"\xff\x00", b"\xff").decode("utf-8", "replace")
        held[name] = held.get(name, 0) + math.prod(int(size) for size in shape.split(b",") if size)
    return held


def _check_data(files, shapes, element_bytes, sliced):
    """Refuse a checkpoint whose data cannot hold the variables its index gives ``shapes``: a
    variable saved as slices that cover part of it (TensorFlow's reader assembles a variable
    from slices that cover it, and fails on one that is not covered, once the model is built);
    and data files smaller than the index's variables, every one counted (the data holds those
    no model uses too), each its elements times its dtype's size (a string counts nothing: its
    length is not in the index)."""
    index = files.weight_files[0]
    partial = [
        "%s: %d of its %d elements" % (name, held, math.prod(shapes[name]))
        for name, held in sorted(sliced.items())
        if name in shapes and held < math.prod(shapes[name])
    ]
    if partial:
        raise CheckpointError(
            "%s: %d %s saved as slices that hold part of them (%s): the checkpoint cannot be read"
            % (index, len(partial), "variable is" if len(partial) == 1 else "variables are", first_few(partial))
        )
    needed = sum(math.prod(shape) * element_bytes.get(name, 0) for name, shape in shapes.items())
    data = files.weight_names[1:]
    held = sum(files.opened.stat(name).st_size for name in data)
    if held < needed:
        raise CheckpointError(
            "%s: its %d variables take %d bytes, and %s %s only %d: the data is truncated or not this index's"
            % (
                index,
                len(shapes),
                needed,
                ", ".join(data) or "no data file",
                "holds" if len(data) < 2 else "hold",
                held,
            )
        )


def checkpoint_files(opened):
    """The names of the checkpoint's index and data shards in the directory ``opened``, each
    opened (`OpenedDirectory.open`): ``bert_model.ckpt`` when present, else the one checkpoint
    the directory holds (NEZHA's release is ``model.ckpt-N``); its data shards
    ``PREFIX.data-00000-of-00001``, ...."""
    names = [name for name in opened.names() if not name.startswith(".")]  # as a glob lists them
    indexes = [name for name in names if fnmatch.fnmatchcase(name, "*.ckpt*.index")]
    if CHECKPOINT + ".index" in indexes:
        indexes = [CHECKPOINT + ".index"]
    if not indexes:
        raise CheckpointError(
            "%s holds no checkpoint: expected bert_model.ckpt.index and bert_model.ckpt.data-00000-of-00001"
            % opened.path
        )
    if len(indexes) > 1:
        raise CheckpointError("%s holds several checkpoints (%s); keep one" % (opened.path, ", ".join(indexes)))
    stem = indexes[0][: -len(".index")]
    data = [name for name in names if name.startswith(stem) and fnmatch.fnmatchcase(name[len(stem) :], ".data-*-of-*")]
    opened.open(indexes[0], "model file", INDEX_BYTES)  # TensorFlow allocates the blocks its index claims
    for name in data or [stem + ".data-00000-of-00001"]:
        opened.open(name, "model file")
    return [indexes[0]] + data


def write_checkpoint(directory, config, variables, vocab, output=None):
    """Write a Google-format directory: ``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*``.

    ``variables`` maps google-research/bert variable names to numpy arrays; ``vocab`` is the
    token list, or the bytes of a checked ``vocab.txt`` (`ModelFiles.vocab_bytes`), written as
    they are (a model's identity records their sha256). TensorFlow is imported here only, so
    reading checkpoints needs none of it. ``output``: the directory a refusal to write names,
    when ``directory`` is its staging directory.
    """
    from bert_whitening.backend import tf, tf_writing

    if not isinstance(vocab, bytes):
        vocab = "".join(token + "\n" for token in vocab).encode("utf-8")
    names = sorted(variables)
    with tf_writing(output or directory, "the model", directory, CheckpointError):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as stream:
            json.dump(config, stream, indent=2)
        with open(os.path.join(directory, "vocab.txt"), "wb") as stream:
            stream.write(vocab)
        tf.raw_ops.SaveV2(
            prefix=os.path.join(directory, CHECKPOINT),
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            # an Identity of each array holds it once, where tf.constant of an array holds two copies
            tensors=[tf.raw_ops.Identity(input=variables[name]) for name in names],
        )

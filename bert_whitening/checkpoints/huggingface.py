"""Hugging Face BERT directories (``config.json``, ``model.safetensors``, ``vocab.txt``).

`variable_reader` reads the safetensors tensors one at a time, under google-research/bert
variable names (linear weights are stored ``(out, in)`` by PyTorch and ``(in, out)`` by
TensorFlow, so they are transposed); `variable_shapes` gives their shapes from the file's header
alone, so the checks before a model is built read no weights; `read` refuses a configuration
that transformers would compute otherwise than bert4keras (``convert-hf`` writes what it reads
as a Google-format checkpoint: `bert_whitening.checkpoints.convert`). Reading needs numpy and
``safetensors`` only, no PyTorch.
"""

import math
import os
import re

from bert_whitening.checkpoints import CheckpointError, read_json
from bert_whitening.io.bounded import SAFETENSORS_HEADER_BYTES
from bert_whitening.io.records import parse_record

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

#: Keys of transformers' ``BertConfig`` that change what ``BertModel`` computes from the same
#: weights and that neither the Google format nor bert4keras' BERT can say, with the one value
#: they compute (transformers' default, also when the key is absent): read with another value
#: (``relative_key`` positions, another LayerNorm epsilon, a decoder's causal mask), the model
#: would silently be another one, encoded or converted.
FIXED_KEYS = {"layer_norm_eps": 1e-12, "position_embedding_type": "absolute", "is_decoder": False}
#: The ``hidden_act`` values that name the same function in transformers (``ACT2FN``) and in
#: bert4keras (Keras' activations; its ``gelu`` is the erf one, as transformers'). transformers'
#: others are unknown to Keras (``gelu_new``) or another function there (``leaky_relu``, of
#: another slope).
ACTIVATIONS = ("gelu", "linear", "mish", "relu", "relu6", "sigmoid", "silu", "swish", "tanh")

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


def _google_names(names):
    """``(name, Google name, transposed)`` of each Hugging Face BertModel tensor of ``names`` an
    encoder uses (heads and buffers dropped); ``transposed`` for the linear weights, which
    PyTorch stores ``(out, in)``."""
    for name in names:
        bare = re.sub(r"^bert\.", "", name)
        if bare.startswith(("embeddings.", "encoder.", "pooler.")) and "position_ids" not in bare:
            google = google_name(name)
            yield name, google, google.endswith("/kernel")


def variable_reader(files):
    """name -> array: the tensor of the safetensors file of the `ModelFiles` ``files`` under its
    Google name (heads and buffers have none), read when it is asked for from the file opened when
    it was checked (`OpenedDirectory.reopened`), whatever its name holds now. A model loads its
    weights one at a time, so that loading holds the model's variables and one weight more, never
    the whole file beside them (`bert_whitening.checkpoints.ModelFiles.check_load_memory`)."""
    from safetensors import safe_open

    path = files.weights_path
    try:  # read with pread(2), not mapped: a mapped file truncated meanwhile kills the process (SIGBUS)
        opened = safe_open(files.opened.reopened(WEIGHTS), framework="numpy", backend="pread")
        sources = {google: (name, transposed) for name, google, transposed in _google_names(opened.keys())}
    except Exception as error:  # safetensors raises its own SafetensorError (not importable here)
        _not_safetensors(path, error)

    def read(google):
        name, transposed = sources[google]
        try:
            tensor = opened.get_tensor(name)
        except Exception as error:
            _not_safetensors(path, error)
        return tensor.T if transposed else tensor

    return read


def variable_shapes(files):
    """Google name -> shape of the arrays `variable_reader` reads of the safetensors file of
    ``files``, from its header alone (`tensor_shapes`): no weight is read."""
    shapes = tensor_shapes(files.weights_path, files.opened)
    return {
        google: shapes[name][::-1] if transposed else shapes[name] for name, google, transposed in _google_names(shapes)
    }


#: Bytes per element of the safetensors dtypes.
_DTYPE_BYTES = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3"), 1),
    **dict.fromkeys(("U16", "I16", "F16", "BF16"), 2),
    **dict.fromkeys(("U32", "I32", "F32"), 4),
    **dict.fromkeys(("U64", "I64", "F64"), 8),
}


def tensor_shapes(path, opened):
    """Tensor name -> shape of the safetensors file ``path`` opened in the `OpenedDirectory`
    ``opened`` (read from that descriptor), from its header alone: an 8-byte
    little-endian length, then that many bytes of JSON, ``{name: {dtype, shape, data_offsets}}``
    (and ``__metadata__``), offsets counted from the header's end.

    The header is what the checks before a build trust, so it must describe the file: its length
    at most `SAFETENSORS_HEADER_BYTES` and within the file, every entry of a known dtype, its
    offsets within the file and spanning exactly dtype x shape bytes, no two overlapping and no
    byte left unindexed (the format forbids holes). Anything else is one line naming ``path``."""
    with open(opened.reopened(os.path.basename(path)), "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        length = int.from_bytes(stream.read(8), "little") if size >= 8 else None
        if length is None or length > min(SAFETENSORS_HEADER_BYTES, size - 8):
            _not_safetensors(
                path,
                "%d bytes, shorter than a header" % size
                if length is None
                else "a header of %d bytes in a file of %d, at most %d allowed"
                % (length, size, SAFETENSORS_HEADER_BYTES),
            )
        header = stream.read(length)
    entries = parse_record(header, None, "its header", lambda problem: _not_safetensors(path, problem))
    entries.pop("__metadata__", None)
    spans = sorted((_span(path, name, entry, size - 8 - length), name) for name, entry in entries.items())
    end, before = 0, None
    for (begin, stop), name in spans:
        if begin != end:
            _not_safetensors(
                path,
                "%s overlaps %s" % (name, before)
                if begin < end
                else "bytes %d to %d belong to no tensor" % (end, begin),
            )
        end, before = stop, name
    if end != size - 8 - length:
        _not_safetensors(path, "bytes %d to %d belong to no tensor" % (end, size - 8 - length))
    return {name: tuple(entry["shape"]) for name, entry in entries.items()}


def _span(path, name, entry, data_bytes):
    """``(begin, end)`` of the tensor ``name``'s bytes, checked against its dtype and shape and
    the ``data_bytes`` after the header."""
    if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPE_BYTES:
        _not_safetensors(path, "%s has no known dtype (%.100r)" % (name, entry))
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not _whole_numbers(shape) or not _whole_numbers(offsets) or len(offsets) != 2:
        _not_safetensors(path, "%s: shape %.100r, data_offsets %.100r" % (name, shape, offsets))
    begin, end = offsets
    if not begin <= end <= data_bytes:
        _not_safetensors(path, "%s: data_offsets %s outside the %d bytes of data" % (name, offsets, data_bytes))
    if end - begin != math.prod(shape) * _DTYPE_BYTES[entry["dtype"]]:
        _not_safetensors(
            path,
            "%s: data_offsets %s span %d bytes, not those of %s %s"
            % (name, offsets, end - begin, entry["dtype"], shape),
        )
    return begin, end


def _whole_numbers(value):
    return isinstance(value, list) and all(type(item) is int and item >= 0 for item in value)


def _not_safetensors(path, problem):
    raise CheckpointError(
        "%s: cannot read the tensors (%s): the file is truncated or not safetensors" % (path, problem)
    ) from None


def read(opened):
    """``(bert_config, weights_path, files)`` of the Hugging Face BERT directory ``opened`` (an
    `OpenedDirectory`), ``files`` the weights' (opened now: their tensors are read from that
    descriptor)."""
    config_path = opened.join(CONFIG)
    weights_path = opened.join(WEIGHTS)
    hf_config = read_json(config_path, opened.fd)
    if hf_config.get("model_type") != "bert":
        raise CheckpointError(
            "%s: model_type %r is not supported; only BERT checkpoints "
            '(model_type "bert") are' % (config_path, hf_config.get("model_type"))
        )
    _refuse_what_bert4keras_computes_otherwise(config_path, hf_config)
    if not opened.exists(WEIGHTS):  # anything else there is open's: "a FIFO, not a regular file"
        only_bin = opened.is_file("pytorch_model.bin")
        raise CheckpointError(
            "missing %s%s; a Hugging Face BERT directory needs config.json, model.safetensors "
            "and vocab.txt"
            % (
                weights_path,
                " (there is only pytorch_model.bin: save the model with safe_serialization=True)" if only_bin else "",
            )
        )
    opened.open(WEIGHTS, "model file")
    config = {key: hf_config[key] for key in CONFIG_KEYS if key in hf_config}
    return config, weights_path, (WEIGHTS,)


def _refuse_what_bert4keras_computes_otherwise(config_path, hf_config):
    """Refuse a configuration that transformers reads as another model than the Google
    configuration made of it (`CONFIG_KEYS`) would be: a `FIXED_KEYS` key of another value, or a
    ``hidden_act`` not in `ACTIVATIONS`."""
    for key, computed in FIXED_KEYS.items():
        if hf_config.get(key, computed) != computed:
            raise CheckpointError(
                "%s: %s is %r, which neither the Google format nor bert4keras' BERT has (they compute %r): "
                "the model would not be this one" % (config_path, key, hf_config[key], computed)
            )
    if hf_config.get("hidden_act") not in ACTIVATIONS:
        raise CheckpointError(
            "%s: hidden_act is %r, not one of the activations bert4keras computes as transformers does (%s)"
            % (config_path, hf_config.get("hidden_act"), ", ".join(ACTIVATIONS))
        )

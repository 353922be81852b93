"""What a training run is asked for (`TrainOptions`, checked once when built) and what follows
from it and the model before TensorFlow is imported (`Plan`: the model's files, the pair files
read, the loss and its labels, the memory a step needs), so that every refusal answers at once.
"""

import dataclasses
import hashlib
import os
from typing import Optional

import numpy as np

from bert_whitening import arguments
from bert_whitening.arguments import is_finite_number, is_number
from bert_whitening.checkpoints.architecture import (
    block_bytes_per_token,
    check_model,
    check_trainable,
    fused_bert_sizes,
)
from bert_whitening.data import STDIN, check_labels, check_readable, display_name, open_local, read_pairs
from bert_whitening.errors import BertWhiteningError, TrainingError
from bert_whitening.io.atomic import check_output_directory
from bert_whitening.io.bounded import check_memory
from bert_whitening.losses import LOSSES
from bert_whitening.losses.cosent import MAX_SCALE
from bert_whitening.names import COSENT_SCALE, DEFAULT_POOLING, check_choice
from bert_whitening.precision import refuse_frozen_weights

#: Copies a training step holds at least of every block's activations: the forward pass's, kept
#: for the backward pass, and the gradients that flow back through them.
BACKWARD_COPIES = 2
#: float32 copies a training step holds of every weight: the weight, its gradient and Adam's two
#: moments.
WEIGHT_COPIES = 4


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Everything a run of `bert_whitening.training.train` is asked for, each checked (type,
    range, choice) when the options are made: one line naming the option at fault.

    Attributes:
        train_file, output, valid_file: the pair file trained on, the model directory written
            (new unless ``overwrite``), the pairs whose Spearman chooses the epoch kept (None:
            the last). Paths are kept as str.
        model, model_type: the base model (a plain BERT; None or ``minilm`` for the built-in
            all-MiniLM-L6-v2) and its type.
        loss: a name of `bert_whitening.losses.LOSSES`; ``scale`` is CoSENT's, ``threshold``
            the softmax's binarisation of labels (`bert_whitening.losses.softmax`).
        pooling, maxlen, lowercase: the encoder trained, as `bert_whitening.models.build_encoder`.
        batch_size: pairs per step; their order is shuffled each epoch from ``seed``, which also
            draws the softmax head: one seed, one result.
        learning_rate: Adam's, constant.
        epochs: passes over the train file; 0 writes the base model unchanged.
        overwrite: replace an existing ``output``.
        resume: checkpoint every epoch beside ``output`` and continue a run stopped with it
            (`bert_whitening.training.state`).
    """

    train_file: str
    output: str
    valid_file: Optional[str] = None
    model: Optional[str] = None
    model_type: str = "bert"
    loss: str = "cosent"
    scale: float = COSENT_SCALE
    threshold: Optional[float] = None
    pooling: str = DEFAULT_POOLING
    maxlen: int = 64
    lowercase: bool = True
    batch_size: int = 32
    learning_rate: float = 2e-5
    epochs: int = 5
    seed: int = 0
    overwrite: bool = False
    resume: bool = False

    def __post_init__(self):
        paths = {"train_file": arguments.path, "output": arguments.path, "valid_file": arguments.optional_path}
        for name, check in paths.items():
            object.__setattr__(self, name, check(getattr(self, name), name))
        object.__setattr__(self, "model", arguments.optional_path(self.model, "model"))
        object.__setattr__(self, "model_type", arguments.text(self.model_type, "model_type").lower())
        for name in ("lowercase", "overwrite", "resume"):
            arguments.boolean(getattr(self, name), name)
        check_choice("loss", self.loss, tuple(LOSSES))
        for name, ok in (
            ("batch_size", is_number(self.batch_size, whole=True) and self.batch_size > 0),
            ("epochs", is_number(self.epochs, whole=True) and self.epochs >= 0),
            ("learning_rate", is_finite_number(self.learning_rate) and self.learning_rate > 0),
            ("scale", is_finite_number(self.scale) and self.scale > 0),
            ("threshold", self.threshold is None or is_finite_number(self.threshold)),
            ("seed", is_number(self.seed, whole=True) and self.seed >= 0),
        ):
            if not ok:
                raise BertWhiteningError("%s %r is out of range" % (name, getattr(self, name)))
        if self.scale > MAX_SCALE:
            raise BertWhiteningError(
                "scale %r is out of range: CoSENT's scale is at most %g (the loss is its largest term "
                "long before; only its gradients grow beyond)" % (self.scale, MAX_SCALE)
            )
        LOSSES[self.loss].check(self)


@dataclasses.dataclass
class PairFile:
    """A pair file read whole: its token-free pairs, its labels, and what ``training.json`` records."""

    path: str
    firsts: list
    seconds: list
    labels: np.ndarray
    sha256: str  # of the bytes the pairs were read from, hashed as they were read

    def record(self):
        """Its file as an absolute path, or ``null`` for standard input (``-`` would be taken
        for a file of that name)."""
        path = None if self.path == STDIN else os.path.abspath(self.path)
        return {"path": path, "sha256": self.sha256, "pairs": len(self.labels)}


def read_pair_file(path, role="train"):
    """The pairs of a senteval_cn file, every line checked (`bert_whitening.data.read_pairs`:
    a line that is not a pair, or a label that is not a finite number, names file and line).
    An empty file, or one whose labels are all equal (nothing to rank, no Spearman), is refused."""
    digest = hashlib.sha256()
    pairs = list(read_pairs(path, opener=lambda path: open_local(path, digest)))
    check_labels(pairs, display_name(path), role)
    labels = np.array([label for _, _, label in pairs], np.float64)
    firsts, seconds = [first for first, _, _ in pairs], [second for _, second, _ in pairs]
    return PairFile(path, firsts, seconds, labels, digest.hexdigest())


@dataclasses.dataclass
class Plan:
    """What a run of ``options`` works from, found before TensorFlow (`Plan.of`): the base
    model's checked files, the pair files read, the loss (`bert_whitening.losses`) and the
    train pairs' labels as its step takes them (``targets``)."""

    options: TrainOptions
    files: object
    train: PairFile
    valid: Optional[PairFile]
    loss: object
    targets: np.ndarray

    @classmethod
    def of(cls, options):
        """Every refusal that needs no TensorFlow but the resumable state's: the model, the
        files, the output, the labels, the memory of a step."""
        o = options
        refuse_frozen_weights("train", TrainingError)
        files = check_model(o.model, o.model_type, o.pooling, o.maxlen)
        check_trainable(files, o.model_type, TrainingError)
        check_readable([o.train_file] + ([o.valid_file] if o.valid_file else []))
        check_output_directory(o.output, [files.directory, o.train_file, o.valid_file], o.overwrite)
        train = read_pair_file(o.train_file, "train")
        valid = read_pair_file(o.valid_file, "valid") if o.valid_file else None
        loss = LOSSES[o.loss](o)
        targets = loss.prepare_labels(train)
        if o.epochs:  # no step is taken otherwise
            check_step_memory(files, o.maxlen, o.batch_size, len(train.labels))
        return cls(o, files, train, valid, loss, targets)

    @property
    def steps(self):
        """Steps per epoch."""
        return -(-len(self.train.labels) // self.options.batch_size)

    def base_model(self):
        """The base model as the record and the resumable state name it: its identity and directory."""
        return {**self.files.identity(self.options.model_type), "directory": os.path.abspath(self.files.directory)}

    def hyperparameters(self):
        """Every setting of the run, as ``training.json`` records them."""
        o = self.options
        return {
            "loss": o.loss,
            **self.loss.settings(),
            "pooling": o.pooling,
            "maxlen": o.maxlen,
            "lowercase": o.lowercase,
            "batch_size": o.batch_size,
            "learning_rate": o.learning_rate,
            "epochs": o.epochs,
            "seed": o.seed,
            "optimizer": "Adam (epsilon 1e-8 on the bias-corrected root, no warm-up, no weight decay)",
            "dropout": 0.0,
        }


def check_step_memory(files, maxlen, batch_size, pairs):
    """Refuse, before TensorFlow is imported, a ``batch_size`` whose training step could not fit
    in the memory this process may use (`check_memory`): the allocator would refuse it deep in
    the first step, after the model is built, with a long traceback. A step of the model
    ``files`` is counted on ``min(batch_size, pairs)`` pairs, both sentences of each at
    ``maxlen`` tokens (the longest a batch pads to), float32: the largest tensors a block holds
    per token (`block_bytes_per_token`, what an encoding call's check counts) for every block,
    `BACKWARD_COPIES` times, and every weight `WEIGHT_COPIES` times (`parameter_count`). It leaves
    out the block's other tensors, the softmax head and TensorFlow's workspace: it is a lower
    bound, so what it refuses cannot fit."""
    sentences = 2 * min(batch_size, pairs)
    blocks = fused_bert_sizes(files.config)["blocks"]
    activations = BACKWARD_COPIES * blocks * sentences * maxlen * block_bytes_per_token(files.config, maxlen)
    weights = WEIGHT_COPIES * 4 * parameter_count(files.config)
    check_memory(
        "--batch-size %d (batch_size): a training step of %d pairs%s at maxlen %d"
        % (batch_size, sentences // 2, " (the whole train file)" if pairs < batch_size else "", maxlen),
        {
            "of %s's activations and their gradients" % files.name: activations,
            "of weights, gradients and Adam's moments": weights,
        },
        TrainingError,
        "give a smaller batch size or maxlen",
    )


def parameter_count(config):
    """The weights of the plain BERT ``config`` (`FusedBert`'s): the three embedding tables and
    their LayerNorm, and per block the query, key, value and output projections, the
    feed-forward's two and two LayerNorms (not the pooler, which only ``pooler`` pooling trains)."""
    sizes = fused_bert_sizes(config)
    hidden, inner = sizes["hidden"], sizes["intermediate"]
    tables = (sizes["vocab_size"] + sizes["segment_vocab_size"] + sizes["max_position"]) * hidden + 2 * hidden
    block = 4 * (hidden * hidden + hidden) + 2 * hidden * inner + inner + hidden + 4 * hidden
    return tables + sizes["blocks"] * block

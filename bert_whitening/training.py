"""Supervised fine-tuning of a plain BERT on senteval_cn pair files, written back as a model
directory that every command reads (issue #43).

`train` reads the pair files (``sentence1<TAB>sentence2<TAB>label``, `bert_whitening.data`),
builds the encoder of one pooling with trainable weights (`bert_whitening.models`, `FusedBert`
only: a plain BERT), and trains it with Adam (no warm-up, no dropout, no weight decay) on
batches of shuffled pairs, each batch one forward pass over both sentences of its pairs:

- ``cosent`` (default): CoSENT on the cosines of the pairs (`bert_whitening.losses.cosent`),
  which needs only the order of the labels (0/1 or 0-5 scores alike);
- ``softmax``: Sentence-BERT's classification head on ``[u, v, |u - v|]``
  (`bert_whitening.losses.softmax`). Integer labels are classes ``0 .. max``; other (graded)
  labels, or any with ``threshold`` given, are binarised: 1 above the threshold, else 0. The
  head is discarded afterwards; its shape is recorded.

With a valid file, each epoch ends with the Spearman of its cosines against its labels (the
vectors are those the encoder gives, float32), and the epoch with the best one is kept;
without, the last. Everything that can be checked without TensorFlow (the options, the output
directory, the model's configuration, every line of the files) is checked first, so a refusal
answers at once; TensorFlow is imported after (this module imports none at its top).

The output is a Google-format directory (`bert_whitening.checkpoints.google`): the base model's
configuration, ``vocab.txt`` copied byte for byte, the fine-tuned weights under
google-research/bert names (the base's pooler kept where the pooling trained none), and
``training.json``, the record of what made it. It is staged beside its target and renamed into
place at the end (`bert_whitening.io.atomic.staged_directory`): a refusal, a loss that is not
finite, an error or SIGINT/SIGTERM leaves no directory.

With ``resume``, each completed epoch is checkpointed in ``.NAME.bert-whitening-resume/`` beside
the output (`Checkpoints`): the weights, the Adam moments and step count, the shuffle's
generator, the epochs' records and the kept epoch's weights, so that a run stopped by a signal,
an error or a crash can be continued by the same call with ``resume`` and ends with the weights
of a run that was never stopped. The state is taken up only by a run of the same base model,
files and settings (`resumable_identity`; ``epochs`` may grow), and held locked by the run that
uses it. It is removed once the output is in place, or when the loss stops being finite (a
resumed run would meet the same step again).
"""

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import numbers
import os
import shutil
import time
from typing import Callable, Optional

import numpy as np

from bert_whitening.checkpoints import TRAINING_FILE
from bert_whitening.config import (
    EncoderConfig,
    block_bytes_per_token,
    check_model,
    check_trainable,
    fused_bert_sizes,
    versions,
)
from bert_whitening.data import STDIN, check_labels, check_readable, display_name, open_local, read_pairs
from bert_whitening.errors import BertWhiteningError, DataError, TrainingError
from bert_whitening.io.atomic import (
    check_output_directory,
    kept_directory,
    publish_directory,
    staged_directory,
    write_stream_atomically,
)
from bert_whitening.io.bounded import JSON_BYTES, NpzMembers, check_memory, first_few
from bert_whitening.names import COSENT_SCALE, DEFAULT_POOLING, LOSSES, check_choice

logger = logging.getLogger(__name__)

#: Graded labels (not whole numbers) are binarised here for ``softmax`` unless told otherwise:
#: the middle of senteval_cn's 0-5 STS scores.
DEFAULT_THRESHOLD = 2.5
#: Sentences per forward pass when the valid file is encoded.
VALID_BATCH = 64
#: What ends the name of a run's resumable state beside its output (``.NAME`` before it).
RESUME_SUFFIX = ".bert-whitening-resume"
#: The state's one file in that directory, replaced atomically after each epoch.
STATE_FILE = "state.npz"
#: The layout of `STATE_FILE`; a state of another layout is refused, not misread.
STATE_FORMAT = 2
#: Copies a training step holds at least of every block's activations: the forward pass's, kept
#: for the backward pass, and the gradients that flow back through them.
BACKWARD_COPIES = 2
#: float32 copies a training step holds of every weight: the weight, its gradient and Adam's two
#: moments.
WEIGHT_COPIES = 4


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


@dataclasses.dataclass
class TrainingResult:
    """What `train` gives back: the record written as ``training.json``, and the trained
    `bert_whitening.models.Encoder` with the kept epoch's weights (the vectors the written
    directory gives)."""

    record: dict
    encoder: object


class DamagedState(TrainingError):
    """A resumable state that cannot be taken up as it is (damaged, or edited by hand): refused,
    and left where it is for the user to look at or remove."""


@dataclasses.dataclass
class Checkpoints:
    """The resumable state of a run with ``resume``: its directory beside the output, the lock
    this run holds on it (a second run resuming at once is refused), this run's
    `resumable_identity`, and the state of `STATE_FILE` found there when the run started (None:
    a fresh start)."""

    directory: str
    lock: int
    identity: dict
    found: Optional[dict]

    @property
    def path(self):
        return os.path.join(self.directory, STATE_FILE)

    def save(self, arrays):
        """Replace the state by ``arrays`` (`write_atomically`: a kill mid-write keeps the last one)."""
        self._refuse_link()
        write_stream_atomically(self.path, lambda stream: np.savez(stream, **arrays), output=False)

    def read(self, use):
        """``use(members)`` on the state file's `NpzMembers` (each array checked by its header
        before it is read); a damaged or crafted state is one line saying how to start again."""
        self._refuse_link()
        try:
            with NpzMembers(self.path, DamagedState, "training state") as members:
                return use(members)
        except DamagedState as error:
            raise DamagedState("%s; remove %s to start again" % (error, self.directory)) from None

    def _refuse_link(self):
        """A symbolic link in the state's place is neither read nor written through: the state
        is the directory's own file."""
        if os.path.islink(self.path):
            raise DamagedState(
                "%s: a symbolic link, not a run's state; remove %s to start again" % (self.path, self.directory)
            )

    def arrays(self, shapes):
        """The state's arrays ``{name: shape}`` (its whole content besides the record), each
        refused unless of that shape and finite (the lock keeps them as they were checked)."""

        def read(members):
            members.expect(set(shapes) | {"state"})
            arrays = {name: members.array(name, shape, kinds="fi") for name, shape in shapes.items()}
            for name, array in arrays.items():
                if not np.isfinite(array).all():
                    raise DamagedState("%s: not a usable training state, %s holds NaN or inf" % (self.path, name))
            return arrays

        return self.read(read)

    def close(self, remove):
        """Release the lock, removing the directory first when ``remove`` or when it holds no state."""
        try:
            if remove or not os.path.exists(self.path):
                shutil.rmtree(self.directory, ignore_errors=True)
        finally:
            os.close(self.lock)


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


#: The most classes the softmax loss takes (labels 0 .. SOFTMAX_CLASSES - 1): Sentence-BERT's
#: task, NLI, has three; a stray large label would otherwise size the head (a label of 1e9: a
#: head of GBs).
SOFTMAX_CLASSES = 1024


def softmax_classes(pairs, threshold=None):
    """``(classes, num_labels, how)`` of the pairs' labels for the ``softmax`` loss: whole
    numbers are classes ``0 .. max``, unless ``threshold`` is given; otherwise (graded labels,
    or a threshold) 1 above ``threshold`` (default `DEFAULT_THRESHOLD`), else 0."""
    labels, name = pairs.labels, display_name(pairs.path)
    if threshold is None and np.all(labels == np.round(labels)):
        negative = np.flatnonzero(labels < 0)
        if len(negative):
            raise DataError(
                "%s:%d: label %g is out of range: softmax classes are the integers 0, 1, 2, ... "
                "(give a threshold, --threshold, to binarise graded labels)"
                % (name, negative[0] + 1, labels[negative[0]])
            )
        largest = int(labels.max())
        if largest >= SOFTMAX_CLASSES:
            at = int(np.argmax(labels))
            raise DataError(
                "%s:%d: label %d makes %d classes, more than the softmax loss takes (%d); give a threshold, "
                "--threshold, to binarise graded labels" % (name, at + 1, largest, largest + 1, SOFTMAX_CLASSES)
            )
        classes = labels.astype(np.int32)
        empty = sorted(set(range(largest + 1)) - set(classes.tolist()))
        if empty:
            logger.warning(
                "%s: no pair has %s %s: the softmax head keeps %s of its %d classes unused",
                name,
                "label" if len(empty) == 1 else "labels",
                first_few([str(label) for label in empty]),
                "one" if len(empty) == 1 else len(empty),
                largest + 1,
            )
        return classes, largest + 1, "integer labels as classes"
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    classes = (labels > threshold).astype(np.int32)
    if np.all(classes == classes[0]):
        raise DataError(
            "%s:1-%d: every label is %s threshold %g: one class, nothing to learn"
            % (name, len(labels), "above" if classes[0] else "at or below", threshold)
        )
    return classes, 2, "labels above %g as 1, the others as 0" % threshold


def train(
    train_file: str,
    output: str,
    valid_file: Optional[str] = None,
    *,
    model: Optional[str] = None,
    model_type: str = "bert",
    loss: str = "cosent",
    scale: float = COSENT_SCALE,
    threshold: Optional[float] = None,
    pooling: str = DEFAULT_POOLING,
    maxlen: int = 64,
    lowercase: bool = True,
    batch_size: int = 32,
    learning_rate: float = 2e-5,
    epochs: int = 5,
    seed: int = 0,
    overwrite: bool = False,
    resume: bool = False,
    report: Optional[Callable[[str], None]] = None,
    progress: Optional[bool] = None,
) -> TrainingResult:
    """Fine-tune ``model`` (a plain BERT; None or ``minilm`` for the built-in all-MiniLM-L6-v2)
    on the pair file ``train_file`` and write it to the new directory ``output`` (see the module
    docstring).

    Args:
        valid_file: pairs whose Spearman chooses the epoch kept (default: the last).
        loss: ``cosent`` or ``softmax``; ``scale`` is CoSENT's, ``threshold`` the softmax's
            binarisation of labels (default: integer labels are classes, others cut at
            `DEFAULT_THRESHOLD`).
        pooling, maxlen, lowercase: the encoder trained, as `bert_whitening.models.build_encoder`.
        batch_size: pairs per step; their order is shuffled each epoch from ``seed``, which also
            draws the softmax head: one seed, one result.
        epochs: passes over the train file; 0 writes the base model unchanged.
        overwrite: replace an existing ``output``.
        resume: checkpoint every epoch beside ``output`` and, when an interrupted run with
            ``resume`` left its state there, continue from its last completed epoch (see the
            module docstring); refused when another run holds that state, or when its base
            model, files or settings (all but ``epochs``) differ from this call's.
        report: called with one line per epoch (default: the log).
        progress: a tqdm bar per epoch; None shows it on a terminal only.

    Raises:
        BertWhiteningError: a refused option, file, model or output (one line, before any
            training); `TrainingError` when the loss stops being finite.
        KeyboardInterrupt: SIGINT (or SIGTERM through the command); with ``resume`` the state
            after the last completed epoch is kept.
    """
    report = report or logger.info
    plan = _checked(**{name: value for name, value in locals().items() if name not in ("report", "progress")})
    return _run(plan, report, progress)


def _checked(**options):
    """Every refusal that needs no TensorFlow, then ``options`` with the files read."""
    o = dataclasses.make_dataclass("Options", options.keys())(**options)
    check_choice("loss", o.loss, LOSSES)
    for name, value, ok in (
        ("batch_size", o.batch_size, _whole(o.batch_size) and o.batch_size > 0),
        ("epochs", o.epochs, _whole(o.epochs) and o.epochs >= 0),
        ("learning_rate", o.learning_rate, _real(o.learning_rate) and o.learning_rate > 0),
        ("scale", o.scale, _real(o.scale) and o.scale > 0),
        ("threshold", o.threshold, o.threshold is None or _real(o.threshold)),
    ):
        if not ok:
            raise BertWhiteningError("%s %r is out of range" % (name, value))
    if o.threshold is not None and o.loss != "softmax":
        raise BertWhiteningError(
            "--threshold binarises the softmax loss's labels; CoSENT takes graded labels as they are"
        )
    if o.loss == "cosent" and o.batch_size < 2:
        raise BertWhiteningError("batch_size 1 gives CoSENT nothing to compare: it ranks the pairs of a batch")
    o.model_type = o.model_type.lower()
    files = check_model(o.model, o.model_type, o.pooling, o.maxlen)
    check_trainable(files, o.model_type, TrainingError)
    check_readable([o.train_file] + ([o.valid_file] if o.valid_file else []))
    check_output_directory(o.output, [files.directory, o.train_file, o.valid_file], o.overwrite)
    o.files = files
    o.train = read_pair_file(o.train_file, "train")
    o.valid = read_pair_file(o.valid_file, "valid") if o.valid_file else None
    if o.loss == "softmax":
        o.targets, o.num_labels, o.classes = softmax_classes(o.train, o.threshold)
    else:
        # CoSENT compares labels alone (which pair should be the closer): their ranks order the
        # pairs as they do, in float32 exactly, where labels cast to float32 could overflow (1e39)
        # or round to one value (1e-50, or 1 + 1e-9), and the loss then saw no order.
        o.targets = np.unique(o.train.labels, return_inverse=True)[1].astype(np.float32)
        o.num_labels = o.classes = None
    if o.epochs:  # no step is taken otherwise
        check_step_memory(o.files, o.maxlen, o.batch_size, len(o.train.labels))
    o.checkpoints = _checkpoints(o) if o.resume else None
    return o


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


def resumable_identity(o):
    """What a state must share with a run to be continued by it: the base model (its identity
    and directory), the train and valid files' sha256 (not their paths), every setting but the
    number of epochs (a longer run passes through the same epochs first: the shuffle of epoch e
    and a constant learning rate do not depend on how many follow), and the state's layout."""
    settings = {name: value for name, value in _hyperparameters(o).items() if name != "epochs"}
    identity = {
        "format": STATE_FORMAT,
        "base_model": _base_model(o),
        "train_sha256": o.train.sha256,
        "valid_sha256": o.valid.sha256 if o.valid is not None else None,
        **settings,
    }
    return json.loads(json.dumps(identity))  # as the state's JSON gives it back


def _checkpoints(o):
    """The `Checkpoints` of ``o.output``, locked, and the state found there checked against this
    run (one line naming the first setting that differs); after every other refusal, so a
    refused run leaves no state directory it created."""
    directory, lock = kept_directory(o.output, RESUME_SUFFIX)
    if lock is None:
        raise TrainingError(
            "%s: another run training into %s holds this state; wait for it or give another --output"
            % (directory, o.output)
        )
    checkpoints = Checkpoints(directory, lock, resumable_identity(o), None)
    try:
        if os.path.lexists(checkpoints.path):
            text = checkpoints.read(lambda members: str(members.array("state", (), kinds="U", limit=JSON_BYTES)))
            checkpoints.found = _checked_state(text, checkpoints)
            _check_resumable(checkpoints, o)
    except BaseException:
        os.close(lock)
        raise
    return checkpoints


def _checked_state(text, checkpoints):
    """The state's record (JSON ``text``) once every field has the form `_checkpoint` writes: a
    record edited by hand is refused in one line rather than failing halfway through a resume."""
    try:
        state = json.loads(text)
        epochs, kept, best, after = state["epochs"], state["kept"], state["best"], state["resumed_after"]
        validated = state["identity"]["valid_sha256"] is not None
        well_formed = (
            isinstance(epochs, list)
            and len(epochs) >= 1  # a state is saved after an epoch
            and all(_epoch_entry(entry, number, validated) for number, entry in enumerate(epochs, 1))
            and type(kept) is int
            and (1 <= kept <= len(epochs) if validated else kept == len(epochs))
            and (_finite(best) if validated else best is None)
            and isinstance(after, list)
            and all(type(epoch) is int and 0 <= epoch <= len(epochs) for epoch in after)
            and after == sorted(after)
        )
        if well_formed:
            order_generator(0).bit_generator.state = state["rng"]  # numpy checks the generator's
    except (ValueError, TypeError, KeyError, AttributeError):
        well_formed = False
    if not well_formed:
        raise DamagedState(
            "%s: cannot resume: its record is damaged or edited; remove %s to start again"
            % (checkpoints.path, checkpoints.directory)
        )
    return state


def _finite(value):
    return type(value) in (int, float) and math.isfinite(value)


def _real(value):
    """A finite real number (numpy's too): not a bool, not a ``"2e-5"``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value):
    """An integer (numpy's too): not a bool (``True`` is no batch size), not a float."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _epoch_entry(entry, number, validated):
    """Whether ``entry`` is the record `_train_and_write` keeps of epoch ``number``."""
    keys = {"epoch", "train_loss", "steps", "seconds"} | ({"valid_spearman"} if validated else set())
    return (
        isinstance(entry, dict)
        and set(entry) == keys
        and entry["epoch"] == number
        and type(entry["steps"]) is int
        and entry["steps"] > 0
        and all(_finite(entry[key]) for key in keys - {"epoch", "steps"})
    )


def _check_resumable(checkpoints, o):
    state, here = checkpoints.found, checkpoints.identity
    there = state.get("identity", {})
    for name in sorted(set(here) | set(there)):
        if here.get(name) != there.get(name):
            raise TrainingError(
                "%s: cannot resume: its %s is %s, this run's is %s; run with the same setting, or "
                "remove %s to start again"
                % (checkpoints.path, name, _shown(there.get(name)), _shown(here.get(name)), checkpoints.directory)
            )
    done = len(state["epochs"])
    if done > o.epochs:
        raise TrainingError(
            "%s: cannot resume: it has %d epochs done, more than epochs %d; ask for %d or more"
            % (checkpoints.path, done, o.epochs, done)
        )


def _shown(value):
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _run(o, report, progress):
    """Train as ``o`` says (TensorFlow from here on) and write the output."""
    with _kept_if_stopped(o.checkpoints):
        return _train_and_write(o, report, progress)


@contextlib.contextmanager
def _kept_if_stopped(checkpoints):
    """Around a run with ``resume``: its state is removed once the output is in place, and when
    the loss stops being finite (a resumed run would take the same steps to the same loss); a
    signal, an error or a crash keeps it, for the same call with ``resume`` to continue; a
    damaged state is left as it was found."""
    if checkpoints is None:
        yield
        return
    try:
        yield
    except DamagedState:
        checkpoints.close(remove=False)
        raise
    except TrainingError:
        checkpoints.close(remove=True)
        raise
    except BaseException:
        checkpoints.close(remove=False)
        if os.path.exists(checkpoints.path):
            logger.warning(
                "the state after the last completed epoch is kept in %s: the same command with --resume "
                "continues from it",
                checkpoints.directory,
            )
        raise
    checkpoints.close(remove=True)


@dataclasses.dataclass
class _Epochs:
    """The epochs done so far: their records, the epoch kept, its weights (None: the weights as
    they are) and valid Spearman, and the epochs after which the run was resumed."""

    done: list
    kept: int
    kept_weights: Optional[list]
    best: Optional[float]
    resumed_after: list


def order_generator(seed):
    """The generator a run shuffles its pairs with: one ``permutation`` of them per epoch, drawn
    in turn (and checkpointed with the run). Called by the training benchmark too, so that the
    peer it compares with is given the same order."""
    return np.random.default_rng(seed)


def _train_and_write(o, report, progress):
    from bert_whitening.backend import keras
    from bert_whitening.encoding import tokenize
    from bert_whitening.models import build
    from bert_whitening.token_ids import log_truncated

    config = EncoderConfig(o.model, o.model_type, o.pooling, o.maxlen, o.lowercase, model_files=o.files)
    encoder = build(config, trainable=True)
    (firsts, cut_firsts), (seconds, cut_seconds) = (tokenize(encoder, s) for s in (o.train.firsts, o.train.seconds))
    log_truncated(cut_firsts + cut_seconds, 2 * len(firsts), o.maxlen)
    step, head, variables = _step_function(o, encoder)
    rng = order_generator(o.seed)
    steps = -(-len(firsts) // o.batch_size)
    base = None  # the base model's valid Spearman, when this run measured it
    if o.checkpoints is not None and o.checkpoints.found is not None:
        run = _resumed(o, encoder, variables, rng)
        report("resumed after epoch %d from %s" % (len(run.done), o.checkpoints.directory))
    else:
        run = _Epochs([], 0, _weights(encoder), None, [])
        if o.valid is not None:
            run.best = base = _valid_spearman(encoder, o.valid)
            report("epoch 0 (the base model): valid Spearman %.4f" % run.best)
    for epoch in range(len(run.done) + 1, o.epochs + 1):
        started = time.perf_counter()
        loss = _epoch(o, step, firsts, seconds, rng.permutation(len(firsts)), epoch, progress)
        entry = {"epoch": epoch, "train_loss": loss, "steps": steps, "seconds": round(time.perf_counter() - started, 3)}
        line = "epoch %d/%d: train loss %.4f" % (epoch, o.epochs, loss)
        if o.valid is None:
            run.kept, run.kept_weights = epoch, None  # the last epoch: the weights as they are
        else:
            entry["valid_spearman"] = spearman = _valid_spearman(encoder, o.valid)
            line += ", valid Spearman %.4f" % spearman
            if epoch == 1 or spearman > run.best:  # the base is reported, not kept, once an epoch ran
                run.kept, run.kept_weights, run.best = epoch, _weights(encoder), spearman
        run.done.append(entry)
        if o.checkpoints is not None:
            _checkpoint(o.checkpoints, run, variables, rng)
        report(line)
    if run.kept_weights is not None:
        keras.backend.batch_set_value(list(zip(_bert(encoder).weights, run.kept_weights, strict=True)))
    if o.valid is not None and o.epochs:
        report("kept epoch %d (valid Spearman %.4f)" % (run.kept, run.best))
        if base is not None and run.best < base:  # an epoch is kept all the same: the output is a trained model
            logger.warning(
                "every epoch scored below the base model on the valid pairs (%.4f against %.4f): "
                "try fewer --epochs or a lower --learning-rate, or use the base model as it is",
                run.best,
                base,
            )
    record = _record(o, head, run, steps)
    _write(o, encoder, record)
    return TrainingResult(record=record, encoder=encoder)


def _checkpoint(checkpoints, run, variables, rng):
    """Save the state after an epoch: the run's bookkeeping and the shuffle's generator (JSON),
    every variable the next step reads (the model's, the head's, Adam's moments and step
    count), and the kept epoch's weights when that epoch is not the last."""
    state = {
        "identity": checkpoints.identity,
        "epochs": run.done,
        "kept": run.kept,
        "best": run.best,
        "resumed_after": run.resumed_after,
        "rng": rng.bit_generator.state,
    }
    arrays = {"state": np.array(json.dumps(state))}
    arrays.update(("variable_%d" % number, variable.numpy()) for number, variable in enumerate(variables))
    if run.kept_weights is not None and run.kept != len(run.done):
        arrays.update(("kept_%d" % number, weight) for number, weight in enumerate(run.kept_weights))
    checkpoints.save(arrays)


def _resumed(o, encoder, variables, rng):
    """The `_Epochs` of the state found, its variables and generator put back in place."""
    from bert_whitening.backend import keras

    state = o.checkpoints.found
    done = len(state["epochs"])
    shapes = {"variable_%d" % number: tuple(variable.shape) for number, variable in enumerate(variables)}
    kept_apart = o.valid is not None and state["kept"] != done  # else the kept epoch is the last done
    if kept_apart:
        shapes.update(("kept_%d" % number, tuple(weight.shape)) for number, weight in enumerate(_bert(encoder).weights))
    arrays = o.checkpoints.arrays(shapes)
    values = [arrays["variable_%d" % number] for number in range(len(variables))]
    _check_state_arrays(o.checkpoints, variables, values, sum(entry["steps"] for entry in state["epochs"]))
    keras.backend.batch_set_value(list(zip(variables, values, strict=True)))
    rng.bit_generator.state = state["rng"]
    kept_weights = None
    if kept_apart:
        kept_weights = [arrays["kept_%d" % number] for number in range(len(_bert(encoder).weights))]
    elif o.valid is not None:
        kept_weights = _weights(encoder)
    return _Epochs(state["epochs"], state["kept"], kept_weights, state["best"], state["resumed_after"] + [done])


def _check_state_arrays(checkpoints, variables, values, steps):
    """Refuse a state whose arrays are not of their variables' types (an int32 array of float
    weights would be cut to integers without a word), or whose optimizer step count (the one
    integer scalar) is not the steps its epochs took: an edited record or step count."""
    for number, (variable, value) in enumerate(zip(variables, values, strict=True)):
        if value.dtype != variable.dtype.as_numpy_dtype:
            problem = "variable_%d holds %s, the variable is %s" % (number, value.dtype, variable.dtype.name)
        elif value.shape == () and value.dtype.kind == "i" and value != steps:
            problem = "its step count is %d, its epochs took %d steps" % (value, steps)
        else:
            continue
        raise DamagedState(
            "%s: cannot resume: %s: damaged or edited; remove %s to start again"
            % (checkpoints.path, problem, checkpoints.directory)
        )


def _step_function(o, encoder):
    """``(step, head, variables)``: one Adam step on a batch of pairs (the ids of their first
    sentences, then of their seconds, padded together) and its labels, returning the batch's
    loss, traced once; the softmax head, or None; every variable whose value the next step
    depends on (the model's, the head's and the optimizer's: what a checkpoint holds)."""
    from bert_whitening import losses
    from bert_whitening.adam import Adam
    from bert_whitening.backend import tf

    head = losses.SoftmaxHead(encoder.dim, o.num_labels, o.seed) if o.loss == "softmax" else None
    variables = encoder.model.trainable_weights + ([head.kernel, head.bias] if head else [])
    optimizer = Adam(variables, o.learning_rate)

    def step(ids, labels):
        with tf.GradientTape() as tape:
            first, second = tf.split(encoder.model([ids, tf.zeros_like(ids)], training=True), 2)
            if head:
                value = head(labels, first, second)
            else:
                cosines = tf.reduce_sum(tf.math.l2_normalize(first, -1) * tf.math.l2_normalize(second, -1), -1)
                value = losses.cosent_loss(labels, cosines, o.scale)
        optimizer.apply(tape.gradient(value, variables))
        return value

    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32 if head else tf.float32)]
    everything = encoder.model.weights + ([head.kernel, head.bias] if head else []) + optimizer.state
    return tf.function(step, input_signature=spec, autograph=False), head, everything


def _epoch(o, step, firsts, seconds, order, epoch, progress):
    """One pass over the pairs in ``order``, ``o.batch_size`` at a time, with its progress bar;
    the mean of its steps' losses. A loss that is not finite stops the run."""
    from tqdm.auto import tqdm

    from bert_whitening.backend import tf
    from bert_whitening.token_ids import pad_ids

    steps, total = -(-len(order) // o.batch_size), 0.0
    disable = None if progress is None else not progress  # None: on a terminal only
    with tqdm(
        total=len(order), unit="pair", desc="epoch %d/%d" % (epoch, o.epochs), leave=False, disable=disable
    ) as bar:
        for number, start in enumerate(range(0, len(order), o.batch_size), 1):
            rows = order[start : start + o.batch_size]
            ids = pad_ids([firsts[row] for row in rows] + [seconds[row] for row in rows])
            value = float(step(tf.constant(ids), tf.constant(o.targets[rows])))
            if not math.isfinite(value):
                raise TrainingError(
                    "epoch %d, step %d: the loss is %s; stopped, nothing was written (a lower "
                    "learning rate may help)" % (epoch, number, value)
                )
            total += value
            bar.update(len(rows))
            bar.set_postfix(step="%d/%d" % (number, steps), loss="%.4f" % value)
    return total / steps


def _bert(encoder):
    from bert_whitening.layers import FusedBert

    (bert,) = [layer for layer in encoder.model.layers if isinstance(layer, FusedBert)]
    return bert


def _weights(encoder):
    """A copy of the transformer's weights (what is kept of an epoch)."""
    return [weight.numpy() for weight in _bert(encoder).weights]


def _valid_spearman(encoder, valid):
    """Spearman of the valid pairs' cosines against their labels, from float32 vectors of the
    encoder as it is now (its inference graph, whatever precision the process encodes in)."""
    from bert_whitening.backend import tf
    from bert_whitening.encoding import batches, compiled, tokenize
    from bert_whitening.evaluation import cosine_spearman

    run = compiled(encoder.model)
    vectors = []
    for sentences in (valid.firsts, valid.seconds):
        sequences, _ = tokenize(encoder, sentences)
        block = np.zeros((len(sequences), encoder.dim), np.float32)
        for rows, ids in batches(sequences, VALID_BATCH):
            block[rows] = run(tf.constant(ids), tf.zeros_like(ids)).numpy()
        vectors.append(block)
    spearman = cosine_spearman(vectors[0], vectors[1], valid.labels)
    if not math.isfinite(spearman):
        raise TrainingError("%s: the valid Spearman is %s (every cosine equal?)" % (valid.path, spearman))
    return spearman


def _record(o, head, run, steps):
    """``training.json``: the base model, the files, every setting, each epoch, versions."""
    return {
        "base_model": _base_model(o),
        "train": o.train.record(),
        "valid": o.valid.record() if o.valid is not None else None,
        "loss": o.loss,
        "hyperparameters": _hyperparameters(o),
        "softmax_head": {"shape": head.shape, "classes": o.classes, "kept": False} if head else None,
        "steps_per_epoch": steps,
        "epochs": run.done,
        "kept_epoch": run.kept,
        "resumed_after": run.resumed_after,
        "versions": versions(),
    }


def _base_model(o):
    """The base model as the record and the resumable state name it: its identity and directory."""
    return {**o.files.identity(o.model_type), "directory": os.path.abspath(o.files.directory)}


def _hyperparameters(o):
    """Every setting of the run, as ``training.json`` records them."""
    return {
        "loss": o.loss,
        "scale": o.scale if o.loss == "cosent" else None,
        "threshold": o.threshold,
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


def _write(o, encoder, record):
    """The fine-tuned model directory, staged and renamed into place (over the old one with
    ``overwrite``, which is removed only once the new one is in place)."""
    import json

    from bert_whitening.backend import tf_writing
    from bert_whitening.checkpoints.google import write_checkpoint
    from bert_whitening.models import checkpoint_variables

    variables = checkpoint_variables(encoder, o.files)
    with staged_directory(o.output) as staging:
        write_checkpoint(staging, o.files.config, variables, o.files.vocab_bytes, o.output)
        with tf_writing(o.output, TRAINING_FILE, staging, TrainingError):
            with open(os.path.join(staging, TRAINING_FILE), "w", encoding="utf-8") as stream:
                json.dump(record, stream, indent=2, ensure_ascii=False)
        publish_directory(staging, o.output, overwrite=o.overwrite)
    logger.info("wrote %s (bert_config.json, bert_model.ckpt.*, vocab.txt, %s)", o.output, TRAINING_FILE)

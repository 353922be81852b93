"""The training loop: epochs of Adam steps over shuffled pairs, each epoch scored on the valid
pairs, the kept epoch written back as a Google-format model directory with ``training.json``.

`train` takes `TrainOptions`; everything that can be checked without TensorFlow (the options,
the output directory, the model's configuration, every line of the files, the resumable state)
is checked first (`Plan.of`, `open_checkpoints`), so a refusal answers at once; TensorFlow is
imported after (this module imports none at its top). Each step is one forward pass over both
sentences of a batch of pairs and the loss of the options (`bert_whitening.losses`: one
protocol, so this loop holds no branch on which loss it runs); Adam without warm-up, dropout or
weight decay.

With a valid file, each epoch ends with the Spearman of its cosines against its labels (the
vectors are those the encoder gives, float32), and the epoch with the best one is kept;
without, the last. The output is staged beside its target and renamed into place at the end
(`bert_whitening.io.atomic.staged_directory`): a refusal, a loss that is not finite, an error
or SIGINT/SIGTERM leaves no directory (with ``resume``, the state of `bert_whitening.training.state`).
"""

import dataclasses
import logging
import math
import os
import time
from typing import Callable, Optional

import numpy as np

from bert_whitening.checkpoints import TRAINING_FILE
from bert_whitening.config import EncoderConfig, versions
from bert_whitening.errors import BertWhiteningError, TrainingError
from bert_whitening.io.atomic import publish_directory, staged_directory
from bert_whitening.training.options import Plan, TrainOptions
from bert_whitening.training.state import (
    Epochs,
    kept_if_stopped,
    open_checkpoints,
    order_generator,
    resumed,
    save_state,
)

logger = logging.getLogger(__name__)

#: Sentences per forward pass when the valid file is encoded.
VALID_BATCH = 64


@dataclasses.dataclass
class TrainingResult:
    """What `train` gives back: the record written as ``training.json``, and the trained
    `bert_whitening.models.Encoder` with the kept epoch's weights (the vectors the written
    directory gives)."""

    record: dict
    encoder: object


def train(
    options: TrainOptions, report: Optional[Callable[[str], None]] = None, progress: Optional[bool] = None
) -> TrainingResult:
    """Fine-tune as ``options`` say (`TrainOptions`) and write the new model directory.

    Args:
        report: called with one line per epoch (default: the log).
        progress: a `bert_whitening.progress.Progress` per epoch, shown as its ``show`` says
            (None: a bar on a terminal, log lines elsewhere).

    Raises:
        BertWhiteningError: a refused model, file, output or state (one line, before any
            training); `TrainingError` when the loss stops being finite.
        KeyboardInterrupt: SIGINT (or SIGTERM through the command); with ``resume`` the state
            after the last completed epoch is kept.
    """
    if not isinstance(options, TrainOptions):
        raise BertWhiteningError("options must be a TrainOptions, got %s" % type(options).__name__)
    plan = Plan.of(options)
    checkpoints = open_checkpoints(plan) if options.resume else None
    with kept_if_stopped(checkpoints):
        return _train_and_write(plan, checkpoints, report or logger.info, progress)


@dataclasses.dataclass
class _Run:
    """What the epochs of a run share once TensorFlow is in: the plan, the state's checkpoints
    (or None), the encoder, its tokenised pairs, the traced step and the shuffle's generator."""

    plan: Plan
    checkpoints: object
    encoder: object
    firsts: list
    seconds: list
    step: Callable
    variables: list
    rng: np.random.Generator


def _train_and_write(plan, checkpoints, report, progress):
    from bert_whitening.backend import keras

    run = _started(plan, checkpoints)
    o = plan.options
    epochs, base = _first_epochs(run, report)
    for epoch in range(len(epochs.done) + 1, o.epochs + 1):
        _one_epoch(run, epochs, epoch, report, progress)
    if epochs.kept_weights is not None:
        keras.backend.batch_set_value(list(zip(_bert(run.encoder).weights, epochs.kept_weights, strict=True)))
    if plan.valid is not None and o.epochs:
        report("kept epoch %d (valid Spearman %.4f)" % (epochs.kept, epochs.best))
        if base is not None and epochs.best < base:  # an epoch is kept all the same: the output is a trained model
            logger.warning(
                "every epoch scored below the base model on the valid pairs (%.4f against %.4f): "
                "try fewer --epochs or a lower --learning-rate, or use the base model as it is",
                epochs.best,
                base,
            )
    record = _record(plan, epochs)
    _write(plan, run.encoder, record)
    return TrainingResult(record=record, encoder=run.encoder)


def _started(plan, checkpoints):
    """The `_Run` of ``plan``: the trainable encoder built, the pairs tokenised, the step traced."""
    from bert_whitening.encoding import tokenize
    from bert_whitening.models import build
    from bert_whitening.tokenization.token_ids import log_truncated

    o = plan.options
    config = EncoderConfig(o.model, o.model_type, o.pooling, o.maxlen, o.lowercase, model_files=plan.files)
    encoder = build(config, trainable=True)
    (firsts, cut_firsts), (seconds, cut_seconds) = (
        tokenize(encoder, s) for s in (plan.train.firsts, plan.train.seconds)
    )
    log_truncated(cut_firsts + cut_seconds, 2 * len(firsts), o.maxlen)
    step, variables = _step_function(plan, encoder)
    return _Run(plan, checkpoints, encoder, firsts, seconds, step, variables, order_generator(o.seed))


def _first_epochs(run, report):
    """``(epochs, base)``: the `Epochs` a run starts from (a resumed state's, or none done) and
    the base model's valid Spearman, when this run measured it."""
    checkpoints, valid = run.checkpoints, run.plan.valid
    if checkpoints is not None and checkpoints.found is not None:
        epochs = resumed(checkpoints, valid is not None, _bert(run.encoder).weights, run.variables, run.rng)
        report("resumed after epoch %d from %s" % (len(epochs.done), checkpoints.directory))
        return epochs, None
    epochs = Epochs([], 0, _weights(run.encoder), None, [])
    if valid is None:
        return epochs, None
    epochs.best = _valid_spearman(run.encoder, valid)
    report("epoch 0 (the base model): valid Spearman %.4f" % epochs.best)
    return epochs, epochs.best


def _one_epoch(run, epochs, epoch, report, progress):
    """Epoch ``epoch``: its steps, its record in ``epochs``, the epoch kept, the state saved."""
    plan = run.plan
    started = time.perf_counter()
    loss = _epoch(plan, run.step, run.firsts, run.seconds, run.rng.permutation(len(run.firsts)), epoch, progress)
    seconds = round(time.perf_counter() - started, 3)
    entry = {"epoch": epoch, "train_loss": loss, "steps": plan.steps, "seconds": seconds}
    line = "epoch %d/%d: train loss %.4f" % (epoch, plan.options.epochs, loss)
    if plan.valid is None:
        epochs.kept, epochs.kept_weights = epoch, None  # the last epoch: the weights as they are
    else:
        entry["valid_spearman"] = spearman = _valid_spearman(run.encoder, plan.valid)
        line += ", valid Spearman %.4f" % spearman
        if epoch == 1 or spearman > epochs.best:  # the base is reported, not kept, once an epoch ran
            epochs.kept, epochs.kept_weights, epochs.best = epoch, _weights(run.encoder), spearman
    epochs.done.append(entry)
    if run.checkpoints is not None:
        save_state(run.checkpoints, epochs, run.variables, run.rng)
    report(line)


def _step_function(plan, encoder):
    """``(step, variables)``: one Adam step on a batch of pairs (the ids of their first
    sentences, then of their seconds, padded together) and its labels, returning the batch's
    loss, traced once; every variable whose value the next step depends on (the model's, the
    loss's and the optimizer's: what a checkpoint holds)."""
    from bert_whitening.backend import tf
    from bert_whitening.encoding import grappler_rewrite
    from bert_whitening.training.adam import Adam

    grappler_rewrite(False)  # the step runs in float32 whatever the process encoded before
    loss = plan.loss
    own = loss.build(encoder.dim)
    variables = encoder.model.trainable_weights + own
    optimizer = Adam(variables, plan.options.learning_rate)

    def step(ids, labels):
        with tf.GradientTape() as tape:
            first, second = tf.split(encoder.model([ids, tf.zeros_like(ids)], training=True), 2)
            value = loss(labels, first, second)
        optimizer.apply(tape.gradient(value, variables))
        return value

    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.as_dtype(plan.targets.dtype))]
    everything = encoder.model.weights + own + optimizer.state
    return tf.function(step, input_signature=spec, autograph=False), everything


def _epoch(plan, step, firsts, seconds, order, epoch, progress):
    """One pass over the pairs in ``order``, a batch at a time, with its progress bar; the mean
    of its steps' losses. A loss that is not finite stops the run."""
    from bert_whitening.backend import tf
    from bert_whitening.progress import Progress
    from bert_whitening.tokenization.token_ids import pad_ids

    batch_size = plan.options.batch_size
    steps, total = -(-len(order) // batch_size), 0.0
    description = "epoch %d/%d" % (epoch, plan.options.epochs)
    with Progress(description, len(order), "pair", show=progress) as bar:
        for number, start in enumerate(range(0, len(order), batch_size), 1):
            rows = order[start : start + batch_size]
            ids = pad_ids([firsts[row] for row in rows] + [seconds[row] for row in rows])
            value = float(step(tf.constant(ids), tf.constant(plan.targets[rows])))
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


def _record(plan, epochs):
    """``training.json``: the base model, the files, every setting, the loss, each epoch, versions."""
    return {
        "base_model": plan.base_model(),
        "train": plan.train.record(),
        "valid": plan.valid.record() if plan.valid is not None else None,
        "loss": plan.options.loss,
        "hyperparameters": plan.hyperparameters(),
        **plan.loss.record(),
        "steps_per_epoch": plan.steps,
        "epochs": epochs.done,
        "kept_epoch": epochs.kept,
        "resumed_after": epochs.resumed_after,
        "versions": versions(),
    }


def _write(plan, encoder, record):
    """The fine-tuned model directory, staged and renamed into place (over the old one with
    ``overwrite``, which is removed only once the new one is in place)."""
    import json

    from bert_whitening.backend import tf_writing
    from bert_whitening.checkpoints.google import write_checkpoint
    from bert_whitening.models import checkpoint_variables

    output, files = plan.options.output, plan.files
    variables = checkpoint_variables(encoder, files)
    with staged_directory(output) as staging:
        write_checkpoint(staging, files.config, variables, files.vocab_bytes, output)
        with tf_writing(output, TRAINING_FILE, staging, TrainingError):
            with open(os.path.join(staging, TRAINING_FILE), "w", encoding="utf-8") as stream:
                json.dump(record, stream, indent=2, ensure_ascii=False)
        publish_directory(staging, output, overwrite=plan.options.overwrite)
    logger.info("wrote %s (bert_config.json, bert_model.ckpt.*, vocab.txt, %s)", output, TRAINING_FILE)

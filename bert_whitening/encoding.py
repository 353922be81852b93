"""Turning sentences into vectors with an `Encoder`.

The original pads a whole split to its longest sentence and calls ``predict``, so most of the
compute goes into padding. Here sentences are sorted by token count, cut into batches, each
batch is padded only to its own longest sentence, and the vectors are put back in input order.
The model runs under one ``tf.function`` whose input signature has a free batch and length, so
no length triggers a retrace. (XLA with fixed length buckets was measured slower than this on
these CPUs, where oneDNN does the matrix products; see benchmarks/bench_encode.py.)

``precision="bfloat16"`` turns on oneDNN's automatic mixed precision (a Grappler rewrite) for
the calls of one `encode_ids`: matrix products in bfloat16, the rest in float32. It needs a CPU
with bfloat16 instructions (AVX512_BF16 or AMX) to be faster; its accuracy is printed by the
benchmark. The option is process-wide while it is on, so encode from one thread at a time.
"""
import contextlib
import functools
import logging
import weakref

import numpy as np
from tqdm.auto import tqdm

from bert_whitening.backend import tf
from bert_whitening.names import PRECISIONS, check_choice

logger = logging.getLogger(__name__)

_COMPILED = weakref.WeakKeyDictionary()


def token_ids(tokenizer, text, maxlen):
    """Ids of ``[CLS] text [SEP]`` cut to ``maxlen`` exactly as bert4keras' ``encode`` cuts.

    bert4keras drops the token before ``[SEP]`` until the sequence fits, which keeps the first
    ``maxlen - 2`` tokens; this does the same in one slice. Returns the ids and whether they
    were cut. An empty sentence is ``[CLS] [SEP]``.
    """
    ids = tokenizer.encode(text)[0]
    if len(ids) <= maxlen:
        return ids, False
    return ids[:maxlen - 1] + ids[-1:], True


def pad(sequences):
    """A ``(len(sequences), longest)`` int32 array, padded with id 0 on the right."""
    padded = np.zeros((len(sequences), max(len(s) for s in sequences)), dtype=np.int32)
    for row, sequence in enumerate(sequences):
        padded[row, :len(sequence)] = sequence
    return padded


def compiled(model):
    """``model`` under one ``tf.function`` taking int32 ``(batch, length)`` ids and segments."""
    if model not in _COMPILED:
        spec = tf.TensorSpec([None, None], tf.int32)
        _COMPILED[model] = tf.function(lambda ids, segments: model([ids, segments], training=False),
                                       input_signature=[spec, spec])
    return _COMPILED[model]


def tokenize(encoder, texts):
    """Token ids of each text and how many of them were cut to ``encoder.maxlen``."""
    encoded = [token_ids(encoder.tokenizer, text, encoder.maxlen) for text in texts]
    return [ids for ids, _ in encoded], sum(cut for _, cut in encoded)


@functools.lru_cache(maxsize=None)
def _cpu_has_bfloat16():
    try:
        with open("/proc/cpuinfo") as stream:
            flags = stream.read()
    except OSError:
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags


@contextlib.contextmanager
def matmul_precision(precision):
    """Inside the block, the model's matrix products run in ``precision`` (see PRECISIONS)."""
    check_choice("precision", precision, PRECISIONS)
    if precision == "float32":
        yield
        return
    if _cpu_has_bfloat16() is False:
        logger.warning("this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): oneDNN "
                       "emulates them, so --precision bfloat16 is likely slower than float32")
    option = "auto_mixed_precision_onednn_bfloat16"
    before = tf.config.optimizer.get_experimental_options().get(option, False)
    tf.config.optimizer.set_experimental_options({option: True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({option: before})


def batches(sequences, batch_size):
    """``(rows, ids)`` per model call: ``batch_size`` rows of ``sequences`` in order of length,
    and their ids padded to the longest of them."""
    order = np.argsort([len(ids) for ids in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        yield rows, pad([sequences[row] for row in rows])


def encode_ids(encoder, sequences, batch_size=128, progress=None, precision="float32"):
    """Vectors of token-id sequences as float32 ``(len(sequences), encoder.dim)``, in order.

    ``progress``: a tqdm bar to advance, True or False for a bar of its own, or None for a bar
    on a terminal only. ``precision``: "float32" or "bfloat16" (see the module docstring).
    """
    vectors = np.zeros((len(sequences), encoder.dim), dtype=np.float32)
    run = compiled(encoder.model)
    bar = progress if hasattr(progress, "update") else tqdm(
        total=len(sequences), unit="sent", leave=False,
        disable=None if progress is None else not progress)
    try:
        with matmul_precision(precision):
            for rows, ids in batches(sequences, batch_size):
                vectors[rows] = run(tf.constant(ids), tf.zeros_like(ids)).numpy()
                bar.update(len(rows))
    finally:
        if bar is not progress:
            bar.close()
    return vectors


def log_truncated(truncated, total, maxlen):
    if truncated:
        logger.info("%d of %d sentences were longer than maxlen %d tokens and were truncated",
                    truncated, total, maxlen)


def encode(encoder, texts, batch_size=128, progress=None, precision="float32"):
    """Vectors of ``texts`` (a list of strings) as float32 ``(len(texts), encoder.dim)``, in order.

    Sentences longer than ``encoder.maxlen`` tokens are truncated, and their count is logged.
    """
    sequences, truncated = tokenize(encoder, texts)
    log_truncated(truncated, len(texts), encoder.maxlen)
    return encode_ids(encoder, sequences, batch_size, progress, precision)

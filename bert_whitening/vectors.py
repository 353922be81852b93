"""Checks and normalisation of vectors: one check of produced vectors before any writer writes them
(`check_vectors`) and the L2 normalisation every path applies (`l2_normalize`). numpy only: the
whitening, the precision check, the encoding, the export, the index and Beam call them alike."""

import numpy as np

from bert_whitening.errors import BertWhiteningError


def l2_normalize(vectors, epsilon=1e-8):
    """Divide each row by its norm, clipped below at ``epsilon`` as in the original.

    Each row is first divided by its largest absolute entry, so the squares summed lie in
    ``[0, 1]``: squaring the raw entries overflows to inf above the square root of the dtype's
    largest number (about 1e19 in float32), and a row would come out as zeros, or underflows
    to 0 for tiny rows. The clip compares the true norm, ``scale * norm of the scaled row``.
    Integer vectors are divided in float64, as the original's numpy divides them: in their own
    dtype every norm would be cut to a whole number.
    """
    vectors = np.asarray(vectors)
    if vectors.dtype.kind != "f":
        vectors = vectors.astype(np.float64)
    scale = np.abs(vectors).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scaled = vectors / np.where(scale > 0, scale, 1).astype(vectors.dtype)
        norms = np.sqrt((scaled**2).sum(axis=1, keepdims=True))  # >= 1 for a non-zero row
        large = norms * scale >= epsilon
        return np.where(large, scaled / np.maximum(norms, 1).astype(vectors.dtype), vectors / epsilon)


#: How far from 1 the norm of a vector that should be L2-normalised may be: float32 round-off
#: of the division is many orders below it, a zero or unnormalised vector far above it.
NORM_TOLERANCE = 1e-3


def check_vectors(vectors, where, normalized=True, start=0, keys=None, stages=()):
    """``vectors`` if every entry is finite and, when ``normalized``, every row has norm 1
    (within `NORM_TOLERANCE`); else a one-line `BertWhiteningError` naming ``where`` (the
    source), the first bad row (``start`` + its index, 0-based, or its ``keys`` entry, a
    ``(file, line)``, which then names the source) and its value. Every writer of vectors calls
    it before writing: a whitening with a huge mean gives zero vectors, a flow with large weights
    NaN vectors, and neither is an error of the arithmetic that made them.

    ``stages`` names what computed the vectors, in order (`bert_whitening.config.EncoderConfig.stages`:
    the model, then its whitening or flow), and the message blames them; without it the vectors
    are the caller's own numbers, and it blames nothing (a float64 row of 1e40 handed to an index
    is not a non-number the model gave, nor a row of 1e-300 a zero vector). A row is zero when
    all its entries are, not when its norm underflows.
    """
    vectors = np.asarray(vectors)
    finite = np.isfinite(vectors).all(axis=1)
    norms = None
    if normalized and finite.all():
        with np.errstate(over="ignore", under="ignore"):
            norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        finite = np.abs(norms - 1) <= NORM_TOLERANCE
    bad = np.flatnonzero(~finite)
    if not bad.size:
        return vectors
    row = int(bad[0])
    named = "%s:%d" % tuple(keys[row]) if keys is not None else "%s: row %d (0-based)" % (where, start + row)
    if norms is None:
        column = int(np.flatnonzero(~np.isfinite(vectors[row]))[0])
        blamed = ": %s gave a non-number" % " or ".join("the " + stage for stage in stages) if stages else ""
        raise BertWhiteningError(
            "%s: the vector holds %s (column %d)%s" % (named, vectors[row, column], column, blamed)
        )
    zero = ""
    if not vectors[row].any():  # named after the last stage, which gave it
        if not stages:
            zero = " (a zero vector)"
        elif stages[-1] == "model":
            zero = " (a zero vector: the model gave it)"
        else:
            zero = " (a zero vector: the %s maps it to 0)" % stages[-1]
    raise BertWhiteningError(
        "%s: the vector has norm %.6g where L2-normalised vectors have 1%s" % (named, _norm(vectors[row]), zero)
    )


def _norm(vector):
    """The norm of one ``vector``, in float64, divided by its largest entry first so that neither
    a row of 1e200 overflows nor one of 1e-300 underflows to a norm of 0."""
    vector = np.asarray(vector, dtype=np.float64)
    scale = np.abs(vector).max(initial=0.0)
    return float(scale * np.linalg.norm(vector / scale)) if scale > 0 else 0.0

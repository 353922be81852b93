"""Whitening statistics, kernel and bias, and the ``.npz`` file format. numpy only.

The transform is the one of BERT-whitening (Su et al., 2021) in its parameterised form
(kexue.fm/archives/9079), with row vectors::

    mu = mean(x_i)
    Sigma_beta = sum_i (x_i - beta*mu)^T (x_i - beta*mu) / (N - 1) = U diag(s) U^T   (s descending)
    kernel = U diag(s ** (-gamma / 2)),  bias = -beta * mu
    y = (x + bias) @ kernel[:, :k]              then L2-normalise

``beta = gamma = 1`` is the original whitening (Sigma_1 is ``np.cov``, as the original
compute_kernel_bias); ``beta = gamma = 0`` rotates onto the eigenvectors of the raw second moment
``E[x^T x]`` and truncates (9079's "free lunch" with k = 256). 9079 divides by N rather than N - 1:
that scales Sigma_beta by one number, which leaves U unchanged and scales every column of the
kernel alike, so the L2-normalised vectors are 9079's exactly; N - 1 keeps beta = 1 equal to the
original scripts' kernel. ``n_components`` keeps the original's meaning everywhere: 0 = no whitening,
negative = all dimensions, ``k > 0`` = keep the first ``k`` columns.
"""

import dataclasses
import json
import logging
import math
from typing import Optional

import numpy as np

from bert_whitening.arguments import finite_number, integer, options_from, positive_int, vector_array
from bert_whitening.codes import CODES, check_codes, quantizer
from bert_whitening.errors import DataError, WhiteningError
from bert_whitening.io.atomic import write_stream_atomically
from bert_whitening.io.bounded import JSON_BYTES, MODEL_SIZES, NpzMembers
from bert_whitening.io.records import Schema, check_fields, parse_record
from bert_whitening.names import RECORDED_POOLINGS, check_recorded, checked_tokenization
from bert_whitening.vectors import check_vectors, l2_normalize

logger = logging.getLogger(__name__)

#: Version 2: the kernel decomposes Sigma_beta. Version 1 decomposed the covariance whatever beta,
#: which is the same kernel when beta = 1: such files still load, others are refused.
FORMAT_VERSION = 2

#: Eigenvalues at or below the round-off floor count as zero, and are raised to it before
#: ``s ** (-gamma / 2)``, so nothing is divided by zero or by a negative round-off value. The floor
#: is the larger of numpy's float64 rank tolerance (``eps64 * dim * largest eigenvalue``) and the
#: variance the vectors' own round-off gives any direction (``eps ** 2 * mean squared norm``,
#: ``eps`` their precision's, `WhiteningStats.epsilon`): for model vectors, computed in float32,
#: ``eps32``: a LayerNorm output (cls, last-avg) or a linear map of one (pooler) has a null
#: direction that float32 arithmetic lifts to about 1e-14 of the largest eigenvalue, while real
#: directions of BERT vectors measured here stay above 1e-8. Vectors a caller computed in float64
#: carry float64's round-off, ``eps64``, and float32's floor would hide their real directions
#: (scales 1e7 apart, or a mean 1e7 times their spread).
EPS64 = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps

#: Rows handed to one float64 outer-product update; bounds the memory of `WhiteningStats.update`
#: (about ``2 * 8 * rows * dim`` bytes: 200 MB at dimension 768).
UPDATE_CHUNK_ROWS = 16384


class WhiteningStats:
    """Running count, mean and centred scatter matrix of vectors, in float64.

    Batches are combined with the pairwise update of Chan, Golub and LeVeque, which stays
    accurate when the mean is large against the spread (BERT vectors have such dimensions).
    Memory is ``dim * dim`` float64 plus one chunk of the batch, whatever the number of vectors.
    Two accumulators over disjoint shards ``merge`` into the accumulator of their union.

    Beside them it keeps ``epsilon``, the round-off of the coarsest vectors added (`_epsilon`),
    which sets the fit's rank floor (`EPS64`), and each column's ``lowest`` and ``highest``
    value, so that a fit says the vectors are identical only when they are.

    Args:
        dim: the vector dimension, or None to take it from the first batch.
    """

    def __init__(self, dim: Optional[int] = None):
        self.dim, self.count, self.mean, self.scatter = None, 0, None, None
        self.epsilon, self.lowest, self.highest = 0.0, None, None  # 0.0: no vector yet
        if dim is not None:
            self._allocate(positive_int(dim, "dim"))

    def _allocate(self, dim):
        """Room for statistics of ``dim`` columns (``dim * dim`` float64), refused before it is
        made beyond the largest hidden size a model may have: a whitening file holds no more."""
        largest = MODEL_SIZES["hidden_size"]
        if dim > largest:
            raise WhiteningError(
                "vectors of dimension %d: at most %d (a model's largest hidden size), whose statistics take %.1f GiB"
                % (dim, largest, largest * largest * 8 / 2**30)
            )
        self.dim, self.mean, self.scatter = dim, np.zeros(dim), np.zeros((dim, dim))
        self.lowest, self.highest = np.full(dim, np.inf), np.full(dim, -np.inf)

    @property
    def identical(self):
        """Whether every vector added is the same (there is at least one)."""
        return self.count > 0 and np.array_equal(self.lowest, self.highest)

    def update(self, vectors, where="the batch", start=0, stages=()):
        """Add a batch of shape ``(n, dim)`` of real numbers (`bert_whitening.arguments.vector_array`).
        A refusal names ``where`` and, for a NaN or infinite entry, its row counted from ``start``
        (`check_vectors`): the caller's row (a file's, say), not this accumulator's, and the
        ``stages`` that computed the vectors, when the caller made them."""
        vectors = vector_array(vectors, where, WhiteningError, self.dim, "the statistics have")
        if self.dim is None:
            self._allocate(vectors.shape[1])
        for first in range(0, len(vectors), UPDATE_CHUNK_ROWS):
            block = check_vectors(
                vectors[first : first + UPDATE_CHUNK_ROWS], where, False, start + first, stages=stages
            )
            chunk = np.asarray(block, dtype=np.float64)
            chunk_mean = chunk.mean(axis=0)
            centred = chunk - chunk_mean
            self._combine(len(chunk), chunk_mean, centred.T @ centred, _epsilon(block), chunk.min(0), chunk.max(0))
        return self

    def update_from_npy(self, path, rows=UPDATE_CHUNK_ROWS):
        """Add every row of a 2-D ``.npy`` file, ``rows`` at a time, in bounded memory
        (`bert_whitening.io.files.npy_blocks`); a refusal names the file and its row."""
        from bert_whitening.io.files import npy_blocks

        for first, block in npy_blocks(path, rows):
            self.update(block, path, first)
        return self

    def merge(self, other):
        """Add the statistics of ``other`` (vectors of a disjoint shard) into this accumulator."""
        if not isinstance(other, WhiteningStats):
            raise WhiteningError("merge takes WhiteningStats, got %s" % type(other).__name__)
        if other is self and self.count:
            raise WhiteningError("cannot merge statistics with themselves: every vector would count twice")
        if other.count == 0:
            return self
        if self.dim is None:
            self._allocate(other.dim)
        if other.dim != self.dim:
            raise WhiteningError("cannot merge statistics of dimension %d and %d" % (self.dim, other.dim))
        self._combine(other.count, other.mean, other.scatter, other.epsilon, other.lowest, other.highest)
        return self

    def _combine(self, count, mean, scatter, epsilon, lowest, highest):
        total = self.count + count
        delta = mean - self.mean
        self.scatter = self.scatter + scatter + np.outer(delta, delta) * (self.count * count / total)
        self.mean = self.mean + delta * (count / total)
        self.count = total
        self.epsilon = max(self.epsilon, epsilon)  # the coarsest vectors' round-off reaches the union
        self.lowest, self.highest = np.minimum(self.lowest, lowest), np.maximum(self.highest, highest)

    @property
    def covariance(self):
        """Sample covariance with ``n - 1`` in the denominator, as ``np.cov``."""
        return self.second_moment(1.0)

    def second_moment(self, beta):
        """``Sigma_beta = sum (x_i - beta*mu)^T (x_i - beta*mu) / (n - 1)`` (kexue.fm/archives/9079),
        from the centred scatter without a second pass: ``(scatter + n (1-beta)^2 mu^T mu) / (n - 1)``."""
        if self.count < 2:
            raise WhiteningError("a covariance needs at least 2 vectors, got %d" % self.count)
        with np.errstate(over="ignore", invalid="ignore"):
            shift = (1.0 - beta) * self.mean
            moment = (self.scatter + self.count * np.outer(shift, shift)) / (self.count - 1)
        if not np.isfinite(self.scatter).all():
            raise WhiteningError(
                "the vectors are too large: their scatter around the mean overflows float64 (largest "
                "mean entry %.3g); scale them down" % np.abs(self.mean).max()
            )
        if not np.isfinite(moment).all():
            raise WhiteningError(
                "beta %g: Sigma_beta overflows float64 (the shift (1 - beta) * mean reaches %.3g); "
                "choose a beta nearer 1" % (beta, np.abs(shift).max())
            )
        return moment


@dataclasses.dataclass(repr=False)
class Whitening:
    """A fitted whitening: ``y = (x + bias) @ kernel[:, :k]``, with what it was fitted on.

    ``kernel`` is kept whole (``dim x dim``); ``n_components`` is the default ``k`` chosen at fit
    time, and ``components(k)`` resolves any other request against the rank of the covariance.

    Attributes:
        kernel: ``U diag(s ** (-gamma / 2))``, eigenvectors of ``Sigma_beta`` by descending
            eigenvalue ``s``, ``(dim, dim)``.
        bias: ``-beta * mean``.
        mean: the mean of the vectors fitted on.
        eigenvalues: ``s``, before the round-off floor.
        rank: how many eigenvalues lie above the round-off floor.
        floor: the round-off floor (`EPS64`), which the eigenvalues at or below it were raised to
            (0.0: not recorded, files of earlier versions).
        count: the number of vectors fitted on.
        n_components, beta, gamma: as given to `fit_whitening`.
        pooling: the pooling of the vectors fitted on ("" when unknown).
        model_identity: the model they came from (name, format, type, hidden size, vocabulary
            sha256), as `bert_whitening.checkpoints.ModelFiles.identity` gives it.
        precision: how the vectors fitted on were computed, ``float32`` or ``bfloat16`` (""
            when unknown: files of earlier versions); one job gives one precision.
        tokenization: how their text was cut and cased, ``{"maxlen", "lowercase"}`` (``{}``
            when unknown), which an encoder it is applied in must share
            (`bert_whitening.config.check_fitted_on`).
        codes: what an encoder with this whitening writes, one of `bert_whitening.codes.CODES`.
        code_scales: int8's scale of each whitened coordinate (its root mean square over the
            sample fitted on), stored with int8 codes; None otherwise (`coordinate_rms` derives it).
    """

    kernel: np.ndarray
    bias: np.ndarray
    mean: np.ndarray
    eigenvalues: np.ndarray
    rank: int
    count: int
    n_components: int = -1
    beta: float = 1.0
    gamma: float = 1.0
    pooling: str = ""
    model_identity: dict = dataclasses.field(default_factory=dict)
    precision: str = ""
    floor: float = 0.0
    tokenization: dict = dataclasses.field(default_factory=dict)
    codes: str = "float32"
    code_scales: Optional[np.ndarray] = None

    @property
    def dim(self):
        return self.kernel.shape[0]

    def __repr__(self):
        """What it is, in one line: the arrays (``dim x dim`` of them) are not printed."""
        return (
            "Whitening(dim=%d, rank=%d, count=%d, n_components=%d, beta=%g, gamma=%g, pooling=%r, "
            "precision=%r, codes=%r)"
            % (
                self.dim,
                self.rank,
                self.count,
                self.n_components,
                self.beta,
                self.gamma,
                self.pooling,
                self.precision,
                self.codes,
            )
        )

    def components(self, n_components=None, allow_rank_deficient=False):
        """The number of kernel columns to keep, or 0 for no whitening.

        ``None`` means the default chosen at fit time. A ``k`` above the rank of the covariance
        would scale directions that only carry round-off noise; it is refused unless
        ``allow_rank_deficient``.
        """
        k = self.n_components if n_components is None else integer(n_components, "n_components")
        return resolve_components(k, self.dim, self.rank, allow_rank_deficient)

    def transform(self, vectors, n_components=None, allow_rank_deficient=False):
        """Whiten (unless ``k`` is 0) and L2-normalise, as the original ``transform_and_normalize``;
        ``vectors`` are refused as `WhiteningStats.update` refuses them (not real numbers, not of
        this whitening's dimension, NaN or infinite), naming the first bad row."""
        k = self.components(n_components, allow_rank_deficient)
        vectors = vector_array(vectors, "vectors", WhiteningError, self.dim, "the whitening's is")
        check_vectors(vectors, "vectors", normalized=False)
        if not k:
            return l2_normalize(vectors)
        return transform_and_normalize(vectors, self.kernel[:, :k], self.bias)

    def coordinate_rms(self, k):
        """The root mean square over the fitted sample of each of the first ``k`` whitened
        coordinates before normalisation (``s ** (1 - gamma)``, its eigenvalues floored), or of
        the raw coordinates when ``k`` is 0 (from the mean and ``Sigma_beta``): int8's scales."""
        floored = np.maximum(self.eigenvalues, self.floor or EPS64 * self.eigenvalues[0])
        if k:
            scales = self.code_scales if self.code_scales is not None else floored ** ((1.0 - self.gamma) / 2.0)
            return np.asarray(scales)[:k]
        axes = self.kernel * floored ** (self.gamma / 2.0)  # U, the eigenvectors of Sigma_beta
        spread = (axes**2) @ np.maximum(self.eigenvalues, 0.0)  # diag Sigma_beta
        n = self.count
        second = ((n - 1) * spread + n * (2 * self.beta - self.beta**2) * self.mean**2) / n  # diag E[x x^T]
        return np.sqrt(np.maximum(second, 0.0))

    def quantizer(self, n_components=None, codes=None, allow_rank_deficient=False):
        """The `bert_whitening.codes.Quantizer` of this whitening's vectors at ``n_components``
        (None: its default) in ``codes`` (None: its own)."""
        k = self.components(n_components, allow_rank_deficient)
        codes = self.codes if codes is None else check_codes(codes)
        return quantizer(codes, k or self.dim, self.coordinate_rms(k))

    def save(self, path):
        """Write one ``.npz``; written to a temporary file first, so a failure leaves no file."""
        write_stream_atomically(path, self.write)

    def write(self, stream):
        """Write the ``.npz`` to a binary stream (see `save` for a file)."""
        meta = {
            "format_version": FORMAT_VERSION,
            "dim": self.dim,
            "rank": self.rank,
            "count": self.count,
            "n_components": self.n_components,
            "beta": self.beta,
            "gamma": self.gamma,
            "pooling": self.pooling,
            "model": self.model_identity,
            "precision": self.precision,
            "floor": self.floor,
            "tokenization": self.tokenization,
            "codes": self.codes,
        }
        scales = {} if self.code_scales is None else {"code_scales": self.code_scales}
        np.savez(
            stream,
            kernel=self.kernel,
            bias=self.bias,
            mean=self.mean,
            eigenvalues=self.eigenvalues,
            meta=np.array(json.dumps(meta)),
            **scales,
        )

    @classmethod
    def load(cls, path, hidden_size=None):
        """Read a file written by `save`, checking every array's shape against ``meta.dim``, and
        that against ``hidden_size`` (the model's it is for, when known) before any array is
        read: a whitening of another model is refused without reading its kernel.

        Anything else (a truncated or corrupt file, a pickled payload, crafted metadata, a header
        claiming more than the dimension gives, a zip bomb) is a `WhiteningError` naming the
        file; nothing in the file is executed, and no array is read before its header is checked.
        """
        with NpzMembers(path, WhiteningError, "whitening file") as members:
            meta = _metadata(path, members.array("meta", (), kinds="U", limit=JSON_BYTES))
            scaled = ("code_scales",) if meta["codes"] == "int8" else ()
            members.expect(("kernel", "bias", "mean", "eigenvalues", "meta") + scaled)
            if hidden_size is not None and meta["dim"] != hidden_size:
                raise WhiteningError(
                    "%s: the whitening has dimension %d but the model's hidden size is %d: it was fitted on "
                    "another model (%s)" % (path, meta["dim"], hidden_size, meta["model"].get("name", "?"))
                )
            dim = meta["dim"]
            expected = {"kernel": (dim, dim), "bias": (dim,), "mean": (dim,), "eigenvalues": (dim,)}
            expected.update({name: (dim,) for name in scaled})
            arrays = {name: members.array(name, shape) for name, shape in expected.items()}
        for name in expected:
            if not np.isfinite(arrays[name]).all():
                raise WhiteningError("%s: %s contains NaN or inf" % (path, name))
        _check_claims(path, arrays, meta)
        if scaled and not (arrays["code_scales"] > 0).all():
            raise WhiteningError("%s: code_scales must be positive, got %.6g" % (path, arrays["code_scales"].min()))
        return cls(
            kernel=arrays["kernel"],
            bias=arrays["bias"],
            mean=arrays["mean"],
            eigenvalues=arrays["eigenvalues"],
            rank=meta["rank"],
            count=meta["count"],
            n_components=meta["n_components"],
            beta=meta["beta"],
            gamma=meta["gamma"],
            pooling=meta["pooling"],
            model_identity=meta["model"],
            precision=meta.get("precision", ""),
            floor=meta["floor"],
            tokenization=meta["tokenization"],
            codes=meta["codes"],
            code_scales=arrays.get("code_scales"),
        )


#: What a whitening file's metadata holds (floor: files of earlier versions record none).
METADATA = Schema(
    required={
        "dim": int,
        "rank": int,
        "count": int,
        "n_components": int,
        "beta": (int, float),
        "gamma": (int, float),
        "pooling": str,
        "model": dict,
    },
    optional={"floor": (int, float), "codes": str},
)


def _metadata(path, stored):
    """The checked metadata of a whitening file: its ``dim`` is bounded before any array of that
    size is read."""
    meta = parse_record(str(stored), None, "%s: its metadata" % path, WhiteningError)
    version = meta.get("format_version")
    if version == 1 and meta.get("beta") != 1:
        raise WhiteningError(
            "%s: format version 1 with beta %s: its kernel decomposes the "
            "covariance around the mean, not Sigma_beta of "
            "kexue.fm/archives/9079 as version %d does; fit it again" % (path, meta.get("beta"), FORMAT_VERSION)
        )
    if version not in (1, FORMAT_VERSION):
        raise WhiteningError(
            "%s: format version %s, this version reads 1 (beta = 1) and %d" % (path, version, FORMAT_VERSION)
        )
    check_fields(meta, METADATA, "%s: metadata" % path, WhiteningError)
    check_recorded(meta.get("precision", ""), RECORDED_PRECISIONS, WhiteningError, "%s: metadata precision" % path)
    check_recorded(meta.setdefault("codes", "float32"), CODES, WhiteningError, "%s: metadata codes" % path)
    floor = meta.setdefault("floor", 0.0)
    if not 0 <= floor < math.inf:
        raise WhiteningError("%s: metadata floor is %r, expected a finite number >= 0" % (path, floor))
    check_recorded(meta["pooling"], RECORDED_POOLINGS, WhiteningError, "%s: metadata pooling" % path)
    meta["tokenization"] = checked_tokenization(  # files of earlier versions record none
        meta.get("tokenization", {}), WhiteningError, "%s: metadata tokenization" % path
    )
    dim = meta["dim"]
    if not (
        1 <= dim <= MODEL_SIZES["hidden_size"]
        and meta["count"] >= 2  # a fit takes at least 2 vectors, and N vectors span at most N directions
        and 1 <= meta["rank"] <= min(dim, meta["count"])
        and np.isfinite([meta["beta"], meta["gamma"]]).all()
    ):
        raise WhiteningError(
            "%s: inconsistent metadata (dim %r, rank %r, count %r, beta %r, "
            "gamma %r)" % (path, dim, meta["rank"], meta["count"], meta["beta"], meta["gamma"])
        )
    if meta["n_components"] > dim:
        raise WhiteningError(
            "%s: metadata n_components is %d, larger than its dimension %d" % (path, meta["n_components"], dim)
        )
    return meta


#: Tolerance of the checks a loaded whitening must pass (relative to the entries compared): far
#: above float64 round-off of a fitted kernel (1e-15), far below any real disagreement.
CLAIM_TOLERANCE = 1e-6


def _check_claims(path, arrays, meta):
    """Refuse a whitening whose arrays disagree with what it says it is: ``kernel = U diag(s **
    (-gamma / 2))`` with ``U`` orthonormal, so ``kernel.T @ kernel`` is diagonal, ``s ** -gamma``
    on its first ``rank`` entries (the floored rest are equal), and ``bias = -beta * mean``.

    Every comparison is made on finite numbers, in a form a NaN fails: a kept eigenvalue of 0 or
    a subnormal one claims an infinite column norm, and ``|d - inf| <= tolerance * inf`` would
    hold for any column ``d``, so the kept eigenvalues must be positive and claim finite, non-zero
    norms first (as a fit's are: it keeps only eigenvalues above its positive floor)."""
    eigenvalues = arrays["eigenvalues"]
    _check_eigenvalues(path, eigenvalues, meta["rank"], meta["floor"])
    claimed, degenerate = _squared_norms(eigenvalues[: meta["rank"]], meta["gamma"])
    if degenerate:
        i, what = degenerate
        raise WhiteningError(
            "%s: eigenvalue %d (%.6g) with gamma %g makes kernel column %d's squared norm s ** -gamma %s: "
            "no fit keeps it" % (path, i, eigenvalues[i], meta["gamma"], i, what)
        )
    diagonal = _orthogonal_norms(path, arrays["kernel"].astype(np.float64))
    _check_column_norms(path, diagonal, claimed, eigenvalues, meta)
    expected_bias = -float(meta["beta"]) * arrays["mean"]
    if not np.allclose(
        arrays["bias"],
        expected_bias,
        rtol=CLAIM_TOLERANCE,
        atol=CLAIM_TOLERANCE * np.abs(expected_bias).max(initial=0.0),
    ):
        raise WhiteningError("%s: bias is not -beta * mean (beta %g)" % (path, meta["beta"]))


def _check_eigenvalues(path, eigenvalues, rank, floor):
    """Refuse eigenvalues a fit would not store: not largest first (the first k columns are the
    k of most variance), a kept one at or below the round-off ``floor`` (0.0 when the file
    records none: a fit's floor is positive), or a floored one above it."""
    rising = np.flatnonzero(np.diff(eigenvalues) > 0)
    if rising.size:
        i = rising[0]
        raise WhiteningError(
            "%s: eigenvalue %d (%.6g) is smaller than eigenvalue %d (%.6g): a fit stores them largest "
            "first, so that n_components keeps the directions of most variance"
            % (path, i, eigenvalues[i], i + 1, eigenvalues[i + 1])
        )
    if not eigenvalues[rank - 1] > floor:  # sorted: the smallest kept one
        raise WhiteningError(
            "%s: eigenvalue %d is %.6g, but rank %d keeps it: a fit keeps only eigenvalues above its "
            "round-off floor, %s"
            % (path, rank - 1, eigenvalues[rank - 1], rank, "%.6g" % floor if floor else "which is positive")
        )
    if floor and rank < len(eigenvalues) and not eigenvalues[rank] <= floor:
        raise WhiteningError(
            "%s: eigenvalue %d (%.6g) is above the round-off floor %.6g, but rank %d floors it"
            % (path, rank, eigenvalues[rank], floor, rank)
        )


def _orthogonal_norms(path, kernel):
    """The squared norms of ``kernel``'s columns, refused unless ``kernel.T @ kernel`` is finite,
    no column is zero and the columns are orthogonal (within `CLAIM_TOLERANCE`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        gram = kernel.T @ kernel
    if not np.isfinite(gram).all():
        raise WhiteningError(
            "%s: kernel.T @ kernel overflows float64 (column %d): not a whitening"
            % (path, np.flatnonzero(~np.isfinite(gram).all(axis=0))[0])
        )
    diagonal = np.diag(gram).copy()
    if not (diagonal > 0).all():
        raise WhiteningError("%s: kernel column %d is zero: not a whitening" % (path, np.argmin(diagonal)))
    norms = np.sqrt(diagonal)
    off = np.abs(gram - np.diag(diagonal)) / norms / norms[:, None]  # no product of norms to overflow
    if not off.max() <= CLAIM_TOLERANCE:
        i, j = np.unravel_index(np.argmax(off), off.shape)
        raise WhiteningError(
            "%s: kernel columns %d and %d are not orthogonal (cosine %.3g): not "
            "U diag(s ** (-gamma / 2)) with orthonormal U" % (path, i, j, off[i, j])
        )
    return diagonal


def _check_column_norms(path, diagonal, claimed, eigenvalues, meta):
    """Refuse kernel columns whose squared norms (``diagonal``) are not the ``claimed`` ``s **
    -gamma`` of the kept eigenvalues, or, beyond the rank, the floor's (equal to one another
    when the file records no floor)."""
    rank, floor, gamma = meta["rank"], meta["floor"], meta["gamma"]
    disagree = np.flatnonzero(~(np.abs(diagonal[:rank] - claimed) <= CLAIM_TOLERANCE * claimed))
    if disagree.size:
        i = disagree[0]
        raise WhiteningError(
            "%s: kernel column %d has squared norm %.6g, but eigenvalue %.6g and gamma "
            "%g say %.6g" % (path, i, diagonal[i], eigenvalues[i], gamma, claimed[i])
        )
    floored = diagonal[rank:]
    if floored.size and floor:  # each s ** -gamma for s = the floor
        (floor_norm,), degenerate = _squared_norms([floor], gamma)
        wrong = np.flatnonzero(~(np.abs(floored - floor_norm) <= CLAIM_TOLERANCE * floor_norm))
        if degenerate or wrong.size:
            i = rank + (wrong[0] if wrong.size else 0)
            raise WhiteningError(
                "%s: kernel column %d has squared norm %.6g, but the round-off floor %.6g and gamma %g say %.6g"
                % (path, i, diagonal[i], floor, gamma, floor_norm)
            )
    elif floored.size and not np.ptp(floored) <= CLAIM_TOLERANCE * floored.max():
        raise WhiteningError("%s: the %d floored kernel columns should have equal norms" % (path, floored.size))


def _squared_norms(eigenvalues, gamma):
    """The squared norms ``s ** -gamma`` of the kernel's columns for positive ``eigenvalues``, and
    the first that is no usable float64 as ``(index, "infinite (overflow)" or "zero
    (underflow)")``, else None. A fit refuses a gamma that makes one (`_refuse_degenerate_scales`),
    so that its kernel's ``kernel.T @ kernel`` is finite and the file loads; a load refuses one,
    which no comparison with a column could then check."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        norms = np.asarray(eigenvalues, dtype=np.float64) ** -float(gamma)
    for test, what in ((~np.isfinite(norms), "infinite (overflow)"), (norms == 0, "zero (underflow)")):
        if test.any():
            return norms, (int(np.flatnonzero(test)[0]), what)
    return norms, None


def _refuse_degenerate_scales(floored, gamma):
    """Refuse a gamma whose kernel columns' squared norms ``s ** -gamma`` overflow or underflow
    to zero (`_squared_norms`), or whose scales ``s ** (-gamma / 2)`` span more than float64 can
    hold in one sum (1 / eps64): the smallest direction would vanish beside the largest in ``x @
    kernel``, and the vectors would not be whitened, or not be numbers."""
    _, degenerate = _squared_norms(floored, gamma)
    if degenerate:
        i, what = degenerate
        raise WhiteningError(
            "gamma %g makes the kernel %s: s ** -gamma, its column's squared norm, for eigenvalue %.3g; "
            "choose a gamma nearer 1" % (gamma, what, floored[i])
        )
    scales = floored ** (-gamma / 2.0)
    if scales.max() / scales.min() > 1 / EPS64:
        raise WhiteningError(
            "gamma %g makes the kernel's scales span %.3g, beyond float64's "
            "precision (%.3g): choose a gamma nearer 1" % (gamma, scales.max() / scales.min(), 1 / EPS64)
        )


def _epsilon(vectors):
    """The relative round-off the values of ``vectors`` carry, whose square scales the rank floor
    (`EPS64`): a float type's own machine epsilon when it is float32's or coarser (model vectors,
    float16); float32's when every value is a float32 (model vectors cast to float64, as ``eval``
    scores them: their precision is still float32's); else float64's, that of the accumulation."""
    if vectors.dtype.kind == "f" and np.finfo(vectors.dtype).eps >= EPS32:
        return float(np.finfo(vectors.dtype).eps)
    with np.errstate(over="ignore"):  # beyond float32's range: not a float32
        narrowed = vectors.astype(np.float32)
    return float(EPS32) if np.array_equal(narrowed, vectors) else float(EPS64)


def _mean_squared_norm(stats):
    return np.trace(stats.scatter) / stats.count + stats.mean @ stats.mean


def _floor_terms(stats, largest):
    """The two terms of the round-off floor (`EPS64`) given the largest eigenvalue: what float64's
    eigen-decomposition resolves beside it, and the variance rounding to the vectors' precision
    gives any direction."""
    return EPS64 * stats.dim * max(largest, 0.0), stats.epsilon**2 * _mean_squared_norm(stats)


def _floor(stats, largest):
    """The round-off floor of eigenvalues (see `EPS64`) given the largest one."""
    return max(_floor_terms(stats, largest))


def _rank(stats, beta):
    """The rank `fit_whitening` finds for Sigma_beta of ``stats``."""
    eigenvalues = np.linalg.eigvalsh(stats.second_moment(beta))
    return int((eigenvalues > _floor(stats, eigenvalues[-1])).sum())


def resolve_components(n_components, dim, rank=None, allow_rank_deficient=False):
    """Map the original's ``n_components`` (0 none, negative all, k) to a column count.

    Directions beyond the rank of the covariance carry only round-off noise, which whitening
    would scale up to unit variance. So "all" means all the directions the covariance supports
    (its rank, with a warning when that is fewer than ``dim``), and an explicit ``k`` above the
    rank is refused; ``allow_rank_deficient`` lifts both (all = ``dim``).
    """
    if n_components > dim:
        raise WhiteningError("n_components %d is larger than the vector dimension %d" % (n_components, dim))
    if rank is None or rank >= dim or allow_rank_deficient:
        return dim if n_components < 0 else n_components
    if n_components < 0:
        logger.warning(
            "n_components %d (all) keeps the %d dimensions the covariance supports, "
            "not all %d: the rest are round-off noise (--allow-rank-deficient keeps "
            "them)",
            n_components,
            rank,
            dim,
        )
        return rank
    if n_components > rank:
        raise WhiteningError(
            "n_components %d is larger than the rank %d of the covariance: the extra directions "
            "hold only round-off noise, which whitening would blow up. Fit on more sentences "
            "(at least dimension + 1), choose n_components <= %d, or allow it explicitly "
            "(allow_rank_deficient / --allow-rank-deficient)" % (n_components, rank, rank)
        )
    return n_components


#: What a whitening file may say of its vectors' precision ("": not recorded).
RECORDED_PRECISIONS = ("", "float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """What a whitening is fitted with: ``n_components`` (the default ``k`` stored: 0 none,
    negative all), ``beta`` and ``gamma`` (the module docstring's Sigma_beta and kernel), and
    ``codes``, what an encoder with it writes (`bert_whitening.codes`; int8 stores its scales).

    ``fit``, ``beam-fit``, `bert_whitening.SentenceEncoder.fit` and each setting of ``eval`` and
    ``eval-retrieval`` build one, so a value no fit can use is refused once, in one line naming
    the option, before any model is built or sentence read, whichever path it came by.
    """

    n_components: int = -1
    beta: float = 1.0
    gamma: float = 1.0
    codes: str = "float32"

    def __post_init__(self):
        check_codes(self.codes, "codes", WhiteningError)
        # plain int and float: numpy scalars would otherwise reach the file's JSON metadata
        object.__setattr__(self, "n_components", integer(self.n_components, "n_components", WhiteningError))
        for name in ("beta", "gamma"):
            object.__setattr__(self, name, finite_number(getattr(self, name), name, WhiteningError))


def fit_whitening(
    stats: WhiteningStats,
    options: Optional[FitOptions] = None,
    *,
    pooling: str = "",
    model_identity: Optional[dict] = None,
    allow_rank_deficient: bool = False,
    precision: str = "",
    tokenization: Optional[dict] = None,
    **keywords,
) -> Whitening:
    """Eigen-decompose ``Sigma_beta`` of ``stats`` (see the module docstring) into a `Whitening`.

    Eigenvalues at or below the round-off floor (see `EPS32`) are raised to it, with a warning
    giving the numbers; the rank counts those above it. Eigenvector signs are fixed (largest
    entry positive) so that fits of the same data in any batch order give the same kernel.

    Args:
        stats: the accumulated vectors (at least 2).
        options: a `FitOptions` (the default ``k`` stored, ``beta``, ``gamma``), or None and
            its fields as ``keywords`` (``n_components=8, beta=0.5``).
        pooling, model_identity, precision, tokenization: what the vectors were, recorded in
            the file.
        allow_rank_deficient: allow an ``n_components`` above the rank.

    Raises `WhiteningError` for options `FitOptions` refuses, identical vectors, or an ``n_components`` it cannot keep.
    """
    options = options_from(FitOptions, options, keywords)
    eigenvalues, vectors = _eigen(stats.second_moment(options.beta))
    resolved, rounding = _floor_terms(stats, eigenvalues[0])
    floor = max(resolved, rounding)
    rank = int((eigenvalues > floor).sum())
    _refuse_rank_zero(stats, eigenvalues, floor, rank)
    if rank < stats.dim:
        _warn_floored(stats, options.beta, eigenvalues, floor, rank, rounding >= resolved)
    floored = np.maximum(eigenvalues, floor)
    _refuse_degenerate_scales(floored, options.gamma)
    _refuse_hidden_directions(stats, options.beta, eigenvalues[0], rank)
    whitening = Whitening(
        kernel=vectors * floored ** (-options.gamma / 2.0),
        bias=-options.beta * stats.mean,
        mean=stats.mean,
        eigenvalues=eigenvalues,
        rank=rank,
        count=stats.count,
        n_components=options.n_components,
        beta=options.beta,
        gamma=options.gamma,
        pooling=pooling,
        model_identity=dict(model_identity or {}),
        precision=precision,
        floor=float(floor),
        tokenization=dict(tokenization or {}),
        codes=options.codes,
    )
    if options.codes == "int8":  # the spread of each whitened coordinate over this very sample
        whitening.code_scales = whitening.coordinate_rms(whitening.dim)
    if options.n_components > 0:
        whitening.components(allow_rank_deficient=allow_rank_deficient)  # refuse a bad k now
    return whitening


def _eigen(moment):
    """Eigenvalues of ``moment``, largest first, and its eigenvectors as columns with their
    largest entry positive: fits of the same data in any order give the same kernel."""
    eigenvalues, vectors = np.linalg.eigh(moment)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues, vectors = eigenvalues[order], vectors[:, order]
    pivots = np.argmax(np.abs(vectors), axis=0)
    return eigenvalues, vectors * np.sign(vectors[pivots, np.arange(vectors.shape[1])])


def _refuse_rank_zero(stats, eigenvalues, floor, rank):
    """Refuse vectors with no direction above the round-off floor, saying why: identical,
    too small for their squares, or differing only by round-off."""
    if rank == 0 and stats.identical:
        raise WhiteningError("all %d vectors are identical: nothing to whiten" % stats.count)
    if rank == 0 and not eigenvalues[0] > 0:  # they differ, but their squares vanish in float64
        raise WhiteningError(
            "the %d vectors are too small: their spread squared underflows float64 (largest entry %.3g); "
            "scale them up" % (stats.count, max(np.abs(stats.lowest).max(), np.abs(stats.highest).max()))
        )
    if rank == 0:
        raise WhiteningError(
            "the %d vectors differ only by round-off: their largest variance, %.3g, is at or below %.3g, what "
            "rounding to their precision (machine epsilon %.3g) gives vectors of mean squared norm %.3g; nothing "
            "to whiten" % (stats.count, eigenvalues[0], floor, stats.epsilon, _mean_squared_norm(stats))
        )


def _warn_floored(stats, beta, eigenvalues, floor, rank, by_rounding):
    """Warn that ``Sigma_beta`` has a rank below the dimension, naming which term set the floor
    (``by_rounding``: the vectors' own precision, else float64's eigen-decomposition)."""
    logger.warning(
        "Sigma_beta (beta %g) of %d vectors of dimension %d has rank %d; %d eigenvalues at or "
        "below %.3g (smallest %.3g) are floored to %.3g (%s)",
        beta,
        stats.count,
        stats.dim,
        rank,
        stats.dim - rank,
        floor,
        eigenvalues[-1],
        floor,
        "the variance rounding to the vectors' precision, machine epsilon %.3g, gives them" % stats.epsilon
        if by_rounding
        else "what float64's eigen-decomposition resolves beside the largest eigenvalue, %.3g" % eigenvalues[0],
    )


def _refuse_hidden_directions(stats, beta, largest, rank):
    """Refuse a beta whose Sigma_beta has a lower rank than the covariance: the mean's direction
    grew so large that round-off hides real directions."""
    covariance_rank = rank if beta == 1.0 else _rank(stats, 1.0)
    if rank < covariance_rank:
        raise WhiteningError(
            "beta %g makes Sigma_beta's largest eigenvalue (%.3g, along the mean) so large that "
            "round-off hides %d of its directions (rank %d, the covariance's is %d); choose a beta "
            "nearer 1" % (beta, largest, covariance_rank - rank, rank, covariance_rank)
        )


def fit_reported(stats, source, options, **recorded):
    """`fit_whitening` with ``options`` (a `FitOptions`) on the statistics of the sentences of
    ``source`` (what the log names), refusing an empty input, and logging what was fitted;
    ``recorded`` are `fit_whitening`'s other arguments (``pooling``, ``model_identity``,
    ``precision``, ``tokenization``, ``allow_rank_deficient``). ``fit`` and ``beam-fit`` end here."""
    if stats.count == 0:
        raise DataError("no sentences in %s" % source)
    try:
        whitening = fit_whitening(stats, options, **recorded)
    except WhiteningError as error:  # what the data cannot give: say which data
        raise WhiteningError("%s: %s" % (source, error)) from None
    k = whitening.components(allow_rank_deficient=recorded.get("allow_rank_deficient", False))
    logger.info(
        "fitted on %d sentences (dimension %d, rank %d), default n_components %d",
        stats.count,
        whitening.dim,
        whitening.rank,
        k,
    )
    if whitening.rank == whitening.dim and stats.count < SENTENCES_PER_COMPONENT * k:
        logger.warning(
            "%s: %d sentences for %d components: with fewer than %d a component, the smallest variances kept are "
            "estimated several times too small, and whitening scales their directions up by as much; fit on more "
            "sentences or keep fewer components (n_components)",
            source,
            stats.count,
            k,
            SENTENCES_PER_COMPONENT,
        )
    return whitening


#: Sentences a kept component needs for `fit_reported` to fit without a warning. Of ``N`` vectors
#: of ``d`` directions, the smallest sample eigenvalue is about ``(1 - sqrt(d / N)) ** 2`` of the
#: true one (Marchenko and Pastur): at ``N = 2 d``, 0.09, so whitening scales that direction up
#: about 3.4 times too much, and more below. A rank below the dimension is warned of already.
SENTENCES_PER_COMPONENT = 2


def compute_kernel_bias(vecs, beta=1.0, gamma=1.0):
    """The original ``compute_kernel_bias``: ``(kernel, bias)`` with ``y = (x + bias) @ kernel``.

    ``vecs`` is one array or a list of arrays (the original concatenates them). The kernel is
    whole; slice ``kernel[:, :k]`` to keep ``k`` components.
    """
    stats = WhiteningStats()
    for batch in [vecs] if isinstance(vecs, np.ndarray) else vecs:
        stats.update(batch)
    whitening = fit_whitening(stats, beta=beta, gamma=gamma)
    return whitening.kernel, whitening.bias


def transform_and_normalize(vecs, kernel=None, bias=None):
    """The original ``transform_and_normalize``: ``(x + bias) @ kernel`` then L2-normalise."""
    if kernel is not None and bias is not None:
        vecs = (vecs + bias) @ kernel
    return l2_normalize(vecs)

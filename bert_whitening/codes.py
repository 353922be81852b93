"""Codes of unit vectors: float32, int8 (a scale per dimension) and binary (a sign bit each).

Whitened coordinates are decorrelated, ordered by variance and of known spread (the variance of
coordinate j over the fitted sample is ``s_j ** (1 - gamma)``), so one scale per kept dimension,
fitted with the whitening, quantises them all alike, and one bit (the sign) keeps most of what
they say. This module is the one definition of a code, of its size, and of the cosine between two
codes; eval, the indexes, search and the Python API all call it. numpy only.

- ``float32``: the unit vector itself; cosine is the dot product.
- ``int8``: ``round(y_j / step_j)`` clipped to [-127, 127], with ``step_j = CLIP * rms_j / (127 *
  R)``: ``rms_j`` the coordinate's root mean square over the fitted sample before normalisation
  and ``R = sqrt(sum of rms_j ** 2 over the kept j)``, the norm such a vector has on average, so
  a unit vector's coordinate is clipped at ``CLIP`` of its own spread. Cosine is the cosine of the
  scaled integers ``code_j * step_j``.
- ``binary``: ``y_j > 0`` packed 8 to a byte (big-endian bit order, the last byte padded with
  zeros, as ``np.packbits`` and sentence-transformers' ``ubinary``). Cosine is that of the +-1
  vectors: ``1 - 2 * hamming / k``.
"""

import dataclasses
from typing import Optional

import numpy as np

from bert_whitening.errors import BertWhiteningError

#: The codes a vector can be stored in, the first the default.
CODES = ("float32", "int8", "binary")

#: Where int8 clips a coordinate, in units of its spread: wide enough that clipping almost never
#: changes a cosine (a narrower range clips the outliers and so changes the ranking, not only its
#: precision), narrow enough that 127 steps still resolve a coordinate's spread in about 21.
CLIP = 6.0

#: The largest int8 code; -127 is the smallest, so that the range is symmetric about 0.
INT8_MAX = 127

#: The dtype of each code's rows.
DTYPES = {"float32": np.dtype("float32"), "int8": np.dtype("int8"), "binary": np.dtype("uint8")}


def check_codes(value, name="codes", error=BertWhiteningError):
    """``value`` if it names a code (`CODES`), else one line naming ``name`` and the choices."""
    if not isinstance(value, str) or value not in CODES:
        raise error("%s must be one of %s, got %r" % (name, ", ".join(CODES), value))
    return value


def code_list(value, name="codes", error=BertWhiteningError):
    """A comma-separated string or a sequence of code names as a tuple without repeats."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, (bytes, dict)) or not hasattr(items, "__iter__"):
        raise error("%s must be code names (%s), got %r" % (name, ", ".join(CODES), value))
    found = tuple(
        dict.fromkeys(check_codes(item.strip() if isinstance(item, str) else item, name, error) for item in items)
    )
    if not found:
        raise error("%s: no code named; choose from %s" % (name, ", ".join(CODES)))
    return found


def bytes_per_vector(codes, k):
    """What one stored vector of ``k`` dimensions takes in ``codes``."""
    return {"float32": 4 * k, "int8": k, "binary": (k + 7) // 8}[check_codes(codes)]


def row_width(codes, k):
    """The number of columns of a code's rows (a binary row packs 8 dimensions a byte)."""
    return (k + 7) // 8 if check_codes(codes) == "binary" else k


@dataclasses.dataclass(frozen=True)
class Quantizer:
    """How unit vectors of ``k`` dimensions become ``codes`` and how two codes are compared.

    ``steps`` (int8 only) is the step of each coordinate of a unit vector, `int8_steps` of the
    coordinates' spreads. Build one with `quantizer`."""

    codes: str
    k: int
    steps: Optional[np.ndarray] = None

    @property
    def bytes(self):
        return bytes_per_vector(self.codes, self.k)

    @property
    def dtype(self):
        return DTYPES[self.codes]

    @property
    def width(self):
        return row_width(self.codes, self.k)

    def encode(self, unit_vectors):
        """The codes of unit row vectors of ``k`` dimensions, as `DTYPES` gives."""
        vectors = np.asarray(unit_vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.k:
            raise BertWhiteningError("expected vectors of shape (n, %d), got %s" % (self.k, vectors.shape))
        if self.codes == "float32":
            return vectors.astype(np.float32)
        if self.codes == "binary":
            return np.packbits(vectors > 0, axis=1)
        scaled = np.rint(vectors.astype(np.float64) / self.steps)
        return np.clip(scaled, -INT8_MAX, INT8_MAX).astype(np.int8)

    def values(self, codes):
        """Float32 unit rows whose dot products are the codes' cosines: the float rows as they
        are, the int8 codes scaled by their steps and normalised, the bits as +-1 over ``sqrt(k)``."""
        codes = self.checked(codes)
        if self.codes == "float32":
            return codes
        if self.codes == "binary":
            signs = np.unpackbits(codes, axis=1, count=self.k).astype(np.float32) * 2 - 1
            return signs / np.float32(np.sqrt(self.k))
        scaled = codes.astype(np.float64) * self.steps
        norms = np.linalg.norm(scaled, axis=1, keepdims=True)
        return (scaled / np.where(norms > 0, norms, 1)).astype(np.float32)

    def checked(self, codes, name="codes"):
        """``codes`` if they are rows of this quantizer's dtype and width, else one line."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.width or codes.dtype != self.dtype:
            raise BertWhiteningError(
                "%s: expected %s codes of shape (n, %d), got %s of shape %s"
                % (name, self.codes, self.width, codes.dtype, codes.shape)
            )
        return codes

    def cosine_rows(self, first, second):
        """The cosine of each row of ``first`` with the same row of ``second`` (both codes), float64."""
        first, second = self.checked(first, "first"), self.checked(second, "second")
        if len(first) != len(second):
            raise BertWhiteningError("codes paired one to one, got %d and %d rows" % (len(first), len(second)))
        if self.codes == "binary":
            return 1.0 - 2.0 * hamming_rows(first, second) / self.k
        return (self.values(first).astype(np.float64) * self.values(second)).sum(axis=1)

    def cosine_matrix(self, first, second):
        """The cosine of every row of ``first`` with every row of ``second``, ``(n, m)``, float64."""
        if self.codes == "binary":
            first, second = self.checked(first, "first"), self.checked(second, "second")
            distances = np.stack([hamming_rows(second, row[None, :]) for row in first]) if len(first) else None
            return 1.0 - 2.0 * distances / self.k if distances is not None else np.zeros((0, len(second)))
        return self.values(first).astype(np.float64) @ self.values(second).astype(np.float64).T


def hamming_rows(first, second):
    """Differing bits of each row of packed ``first`` with the same (or a broadcast) row of ``second``."""
    return np.bitwise_count(np.bitwise_xor(first, second)).sum(axis=1, dtype=np.int64)


def int8_steps(rms):
    """The step of each coordinate of a unit vector whose unnormalised coordinates have root mean
    squares ``rms`` (see the module docstring); a coordinate of no spread gets the smallest other
    step, so nothing is divided by zero."""
    rms = np.asarray(rms, dtype=np.float64)
    if rms.ndim != 1 or not len(rms) or not np.isfinite(rms).all() or (rms < 0).any() or not (rms > 0).any():
        raise BertWhiteningError("int8 scales must be finite, >= 0 and not all 0, got %s" % rms[:8])
    rms = np.where(rms > 0, rms, rms[rms > 0].min())
    return CLIP * rms / (INT8_MAX * np.sqrt((rms**2).sum()))


def quantizer(codes, k, rms=None):
    """The `Quantizer` of ``codes`` for ``k`` dimensions; int8 needs ``rms``, the spread of each
    of the ``k`` coordinates over the fitted sample (`bert_whitening.whitening.Whitening.code_scales`)."""
    codes = check_codes(codes)
    if codes != "int8":
        return Quantizer(codes, k)
    if rms is None or len(rms) < k:
        raise BertWhiteningError("int8 codes of %d dimensions need the spread of each, fitted with a whitening" % k)
    return Quantizer(codes, k, int8_steps(np.asarray(rms)[:k]))

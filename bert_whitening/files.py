"""Reading files whole or in bounded blocks: checksums and ``.npy`` matrices of any size.

numpy only, so that refusals about files answer before TensorFlow is imported.
"""

import hashlib

import numpy as np

from bert_whitening.errors import DataError


def file_sha256(path):
    """The sha256 of a file's bytes, read 1 MB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def npy_blocks(path, rows):
    """``(first_row, block)`` of a 2-D C-ordered ``.npy`` matrix, ``rows`` rows at a time.

    Each block is mapped alone and unmapped after use: one ``np.load(mmap_mode="r")`` over the
    whole file would keep every page it touched resident, so a file as large as the machine's
    memory would fill it. A file that is not such a matrix is a `DataError` naming it.
    """
    try:
        whole = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as error:
        raise DataError("%s: not a readable .npy array (%s)" % (path, error)) from None
    shape, dtype, offset, fortran = whole.shape, whole.dtype, whole.offset, whole.flags.f_contiguous
    del whole
    if len(shape) != 2 or (fortran and shape[0] > 1 and shape[1] > 1):
        raise DataError(
            "%s: expected a 2-D C-ordered array of vectors, got shape %s%s"
            % (path, shape, " in Fortran order" if len(shape) == 2 else "")
        )
    for start in range(0, shape[0], rows):
        count = min(rows, shape[0] - start)
        block = np.memmap(path, dtype, "r", offset + start * shape[1] * dtype.itemsize, (count, shape[1]))
        yield start, block
        del block

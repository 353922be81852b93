"""An ``.npy`` array of rows (float32, or a code's int8 or uint8) written as they arrive, for outputs of unknown length.

The rows are appended with ordinary writes, so a full disk is an ``OSError`` at the write that
fails (a memory-mapped output dies of SIGBUS instead), and the input never has to be counted
first: standard input and pipes are read once. The header is written with room for any row
count and filled in by `close`; a file whose writer did not close is not a valid array.
"""

import struct

import numpy as np

MAGIC = b"\x93NUMPY\x01\x00"
HEADER_BYTES = 128  # magic, length and a padded dict: room for any (rows, dim), 64-byte aligned


def _header(rows, dim, dtype):
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (dtype.str, rows, dim)
    padding = HEADER_BYTES - len(MAGIC) - 2 - len(text) - 1
    return MAGIC + struct.pack("<H", HEADER_BYTES - len(MAGIC) - 2) + (text + " " * padding + "\n").encode("latin1")


class NpyRowWriter:
    """``with NpyRowWriter(path, dim) as out: out.append(rows)``; ``out.rows`` counts them, each
    ``dim`` columns of ``dtype``."""

    def __init__(self, path, dim, dtype="<f4"):
        self.path, self.dim, self.rows, self.dtype = path, dim, 0, np.dtype(dtype)
        self._stream = open(path, "wb")
        self._stream.write(b"\0" * HEADER_BYTES)  # not an array until close() writes the header

    def append(self, vectors):
        vectors = np.asarray(vectors)
        if vectors.dtype.kind != self.dtype.kind:  # float rows are cast; codes are not made here
            raise ValueError("expected rows of %s, got %s" % (self.dtype, vectors.dtype))
        vectors = np.ascontiguousarray(vectors, dtype=self.dtype)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError("expected rows of dimension %d, got shape %s" % (self.dim, vectors.shape))
        self._stream.write(vectors.tobytes())
        self.rows += len(vectors)

    def close(self):
        """Write the header for the rows appended, flush, and check the file's size."""
        self._stream.seek(0)
        self._stream.write(_header(self.rows, self.dim, self.dtype))
        self._stream.flush()
        size = self._stream.seek(0, 2)
        self._stream.close()
        expected = HEADER_BYTES + self.rows * self.dim * self.dtype.itemsize
        if size != expected:
            raise OSError("%s has %d bytes, expected %d for %d rows" % (self.path, size, expected, self.rows))

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None:
            self.close()
        else:
            self._stream.close()

"""Reading files whole or in bounded blocks: checksums and ``.npy`` matrices of any size, and the
files of a checked directory (an index's, an export's) read from the descriptors that were checked.

numpy only, so that refusals about files answer before TensorFlow is imported.
"""

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
import tempfile
import weakref

import numpy as np

from bert_whitening.arguments import positive_int
from bert_whitening.errors import DataError
from bert_whitening.io.bounded import (
    BLOCK,
    HEADER_ERRORS,
    MODEL_SIZES,
    described,
    npy_header,
    open_regular,
    read_limited,
)

#: The most bytes of a ``.npy`` matrix `npy_blocks` reads at a time, whatever rows its caller asks
#: for: with the widest vectors of the widest floats, a block of a caller's rows would hold
#: gigabytes.
NPY_BLOCK_BYTES = 64 << 20


def file_sha256(*paths):
    """The sha256 of a file's bytes (of several files', one after the other), read 1 MB at a time."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(BLOCK), b""):
                digest.update(block)
    return digest.hexdigest()


def npy_blocks(path, rows):
    """``(first_row, block)`` of a 2-D C-ordered ``.npy`` matrix, ``rows`` rows at a time.

    Each block is read (``pread``) from the one descriptor opened, into memory of its own, so
    memory stays at a block whatever the file's size. It is not mapped: a mapped page past the
    end of a file cut short meanwhile kills the process (SIGBUS), and mapping reads what is not
    there as zeros. The file must hold exactly the array its header declares, as `NpyRowWriter`
    writes it: one cut short (before or while it is read) is refused naming the row where it
    ends, bytes after the last row as not that array. Anything else that is not such a matrix is
    a `DataError` naming the file; ``rows`` that is not a positive integer is refused before the
    file is opened. Rows are vectors, no wider than a model's hidden size may be (`MODEL_SIZES`):
    a header declaring wider ones is refused before a block is read, and a block holds at most
    `NPY_BLOCK_BYTES` (fewer rows than ``rows`` when they are wide), so what a block takes is
    bounded whatever the header says.
    """
    rows = positive_int(rows, "rows")
    with open_regular(path, DataError, ".npy file") as stream:
        shape, dtype, offset = _npy_matrix(path, stream)
        descriptor, row_bytes = stream.fileno(), shape[1] * dtype.itemsize
        rows = min(rows, NPY_BLOCK_BYTES // row_bytes)
        _check_size(path, os.fstat(descriptor).st_size, offset, shape, row_bytes)
        for start in range(0, shape[0], rows):
            count = min(rows, shape[0] - start)
            block = bytearray(count * row_bytes)
            done = _read_into(path, descriptor, block, offset + start * row_bytes)
            if done < len(block):
                raise _cut_short(path, start + done // row_bytes, shape[0], "it was cut short while read")
            yield start, np.frombuffer(block, dtype).reshape(count, shape[1])
            del block
        _check_size(path, os.fstat(descriptor).st_size, offset, shape, row_bytes)


def _npy_matrix(path, stream):
    """``(shape, dtype, offset)`` of the 2-D float matrix whose ``.npy`` header ``stream``
    begins with; anything else is a `DataError` naming ``path``."""
    try:
        magic = stream.read(len(np.lib.format.MAGIC_PREFIX))
        stream.seek(0)
        header = npy_header(stream) if magic == np.lib.format.MAGIC_PREFIX else None
    except HEADER_ERRORS as error:
        raise DataError("%s: not a readable .npy array (%s)" % (path, described(error))) from None
    except OSError as error:
        raise DataError("%s: cannot read the .npy file (%s)" % (path, error.strerror)) from None
    if header is None:  # np.load would take it for a pickle and talk of allow_pickle
        raise DataError("%s: not a .npy file (it does not start with the .npy magic string)" % path)
    shape, fortran, dtype = header
    if dtype.kind != "f":  # complex parts would be dropped, integers are not vectors we write
        raise DataError("%s: holds %s, expected floating-point vectors" % (path, dtype))
    if len(shape) != 2 or shape[1] < 1:
        raise DataError(
            "%s: expected a 2-D array of vectors (one a row, at least one column), got shape %s" % (path, shape)
        )
    if shape[1] > MODEL_SIZES["hidden_size"]:
        raise DataError(
            "%s: rows of %d numbers, wider than any vector (a model's hidden size is at most %d)"
            % (path, shape[1], MODEL_SIZES["hidden_size"])
        )
    if fortran and shape[0] > 1 and shape[1] > 1:  # one row or column: the same bytes in either order
        raise DataError("%s: expected a 2-D C-ordered array of vectors, got shape %s in Fortran order" % (path, shape))
    return shape, dtype, stream.tell()


def _check_size(path, size, offset, shape, row_bytes):
    """Refuse a file whose ``size`` is not its header's and the ``shape`` it declares."""
    end = offset + shape[0] * row_bytes
    if size < end:
        raise _cut_short(path, (size - offset) // row_bytes, shape[0], "cut short")
    if size > end:
        raise DataError(
            "%s: %d bytes after the %d rows its header declares: not the array its header says"
            % (path, size - end, shape[0])
        )


def _cut_short(path, complete, rows, why):
    """The refusal of a file that ends after ``complete`` whole rows of the ``rows`` declared."""
    return DataError(
        "%s: ends within row %d (counted from 1) of the %d rows its header declares: %s"
        % (path, complete + 1, rows, why)
    )


def _read_into(path, descriptor, buffer, offset):
    """Fill ``buffer`` from ``offset``: how many bytes there were (fewer at the end of the file)."""
    view, done = memoryview(buffer), 0
    try:
        while done < len(buffer) and (got := os.preadv(descriptor, [view[done:]], offset + done)):
            done += got
    except OSError as error:
        raise DataError("%s: cannot read the .npy file (%s)" % (path, error.strerror)) from None
    return done


def open_directory(path, error=DataError):
    """A descriptor of the directory ``path``, through which a checked directory's files are then
    opened (`CheckedFile`, `OpenedDirectory`): renaming another directory to ``path`` afterwards
    changes nothing read through it. An ``error`` naming ``path`` when it is not a readable
    directory."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error("%s: the directory does not exist" % path) from None
    except NotADirectoryError:
        raise error("%s: not a directory" % path) from None
    except OSError as error_:
        raise error("%s: cannot read it (%s)" % (path, error_.strerror)) from None


class OpenedDirectory:
    """A directory read through one descriptor of it (`open_directory`), each of its files opened
    once by name through it and then read only through the file's own descriptor: another
    directory renamed over ``path``, or a file renamed over a name, once a file is opened changes
    nothing read of it (a model's weights digested, then loaded). A link inside is followed when
    its file is opened, once (a Hugging Face cache's files are links). Errors are ``error``s
    naming the file's path under ``path``; the descriptors (and `linked`'s directory) are
    released with the object."""

    def __init__(self, path, error):
        self.path, self.error = path, error
        self.fd = open_directory(path, error)
        self._files, self._links = {}, []
        weakref.finalize(self, _release, self.fd, self._files, self._links)

    def join(self, name):
        return os.path.join(self.path, name)

    def names(self):
        """The names in the directory now."""
        return sorted(os.listdir(self.fd))

    def exists(self, name, follow_symlinks=True):
        """Whether ``name`` is there (`os.path.exists`; `os.path.lexists` without following)."""
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=follow_symlinks)
        except (OSError, ValueError):
            return False
        return True

    def is_file(self, name):
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=self.fd).st_mode)
        except (OSError, ValueError):
            return False

    def read(self, name, limit, what="file"):
        """The bytes of the regular file ``name``, at most ``limit`` (`read_limited`)."""
        return read_limited(self.join(name), limit, self.error, what, self.fd)

    def open(self, name, what="file", limit=None):
        """The one descriptor of the regular file ``name`` (`open_regular`), opened on first use."""
        if name not in self._files:
            self._files[name] = open_regular(self.join(name), self.error, what, limit, self.fd)
        return self._files[name].fileno()

    def stat(self, name):
        """``os.fstat`` of the opened ``name``."""
        return os.fstat(self.open(name))

    def sha256(self, names):
        """The sha256 of the opened files ``names``' bytes, one after the other."""
        digest = hashlib.sha256()
        for name in names:
            descriptor, offset = self.open(name), 0
            while block := os.pread(descriptor, BLOCK, offset):
                digest.update(block)
                offset += len(block)
        return digest.hexdigest()

    def reopened(self, name):
        """A path that opens the file ``name`` was opened as, whatever its name holds now, for a
        reader that takes a path (safetensors)."""
        return "/proc/self/fd/%d" % self.open(name)

    def linked(self, names):
        """A private directory (made once) where each of ``names`` is a link to its `reopened`
        path: for a reader that takes a path prefix and opens the files beside it (TensorFlow's
        checkpoint reader), which then reads the files opened here."""
        if not self._links:
            self._links.append(tempfile.mkdtemp(prefix=".bert-whitening-model-"))
        for name in names:
            link = os.path.join(self._links[0], name)
            if not os.path.lexists(link):
                os.symlink(self.reopened(name), link)
        return self._links[0]

    def named(self, message):
        """``message`` (a reader's, of a `linked` path) naming the directory instead of the links."""
        return message.replace(self._links[0], self.path) if self._links else message


def _release(directory_fd, files, links):
    for stream in files.values():
        stream.close()
    os.close(directory_fd)
    for path in links:
        shutil.rmtree(path, ignore_errors=True)


def open_regular_at(directory_fd, name, where):
    """A descriptor of the regular file ``name`` (``a/b`` for one in a subdirectory) under the
    directory descriptor ``directory_fd``. No component may be a symbolic link, ``..`` or empty,
    so the file is one of the directory's own; a FIFO or a device is refused without being read
    (opened non-blocking: a FIFO would wait for a writer). Errors name ``where`` and ``name``."""
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise DataError("%s: %r is not a file name inside the directory" % (where, name))
    opened = [directory_fd]
    try:
        for part in parts[:-1]:
            opened.append(_open_at(opened[-1], part, os.O_DIRECTORY, where, name))
        descriptor = _open_at(opened[-1], parts[-1], os.O_NONBLOCK, where, name)
    finally:
        for descriptor_to_close in opened[1:]:
            os.close(descriptor_to_close)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise DataError("%s: %s is not a regular file" % (where, name))
    os.set_blocking(descriptor, True)
    return descriptor


def _open_at(directory_fd, part, flags, where, name):
    try:
        return os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=directory_fd)
    except FileNotFoundError:
        raise DataError("%s: no %s" % (where, name)) from None
    except OSError as error:
        # O_NOFOLLOW answers ELOOP for a link, ENOTDIR with O_DIRECTORY
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(directory_fd, part):
            raise DataError("%s: %s is a symbolic link (%s), not a regular file" % (where, name, part)) from None
        raise DataError("%s: cannot read %s (%s)" % (where, name, error.strerror)) from None


def _is_link(directory_fd, part):
    try:
        return stat.S_ISLNK(os.stat(part, dir_fd=directory_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def file_sha256_at(directory_fd, name, where):
    """The sha256 of the regular file ``name`` under ``directory_fd`` (see `open_regular_at`)."""
    with os.fdopen(open_regular_at(directory_fd, name, where), "rb", buffering=0) as stream:
        return _Hashing(stream.fileno()).rest()


def read_limited_at(directory_fd, name, limit, where):
    """The bytes of the regular file ``name`` under ``directory_fd``, refused beyond ``limit``
    bytes (a record is small; anything larger is not one)."""
    with os.fdopen(open_regular_at(directory_fd, name, where), "rb") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise DataError("%s: %s is larger than %d bytes: not the record it should be" % (where, name, limit))
    return data


class CheckedFile:
    """One file of a checked directory (an index's, an export's), opened once through the
    directory's descriptor and read only through its own, so a file renamed over the name, or
    another directory renamed over the directory, changes nothing read. Its sha256 must be
    ``sha256`` at opening, before any reader sees a byte; every later read hashes again what it
    reads (`reading`, `read`), so content written over in place since the check is refused
    rather than mixed with what was checked. Errors name ``where``, the file, ``record`` (the
    file that holds the checksums) and what the directory is, ``made`` (``"this index was built
    with"``).

    ``limit``: ``(size, holder)``, the most bytes the file can hold and what holds that much
    (``"a whitening of dimension 768"``), for a file `read` whole: a larger one is refused before
    it is hashed (which reads a sparse file of any size to its end) or read."""

    def __init__(self, directory_fd, name, sha256, where, record, made, limit=None, lines=None):
        self.name, self.sha256, self.where, self.record, self.limit = name, sha256, where, record, limit
        self._file = os.fdopen(open_regular_at(directory_fd, name, where), "rb", buffering=0)
        if limit is not None and self.size > limit[0]:
            self._refuse_larger(self.size)
        opening = _Hashing(self._file.fileno(), lines)
        if opening.rest() != sha256:
            raise DataError(
                "%s: %s is not the file %s (sha256 differs from %s's %s...): the directory was edited"
                % (where, name, made, record, str(sha256)[:12])
            )
        #: How many lines the file holds (a last one without its line end counted), counted on
        #: the reading that checked it: a reader of rows needs no second pass to count them.
        self.lines = opening.line_ends + (opening.last not in (b"", b"\n"))
        #: With ``lines`` (the most lines the file may hold; the caller refuses more): where each
        #: line starts (and the file's size after the last), and the sha256 of each `LINE_BLOCK`,
        #: taken on the reading that checked it, for `line`; None beyond ``lines``.
        self._starts, self._block_digests = opening.line_index()
        self._checked_size = opening.offset
        self._last_line_ended = opening.last == b"\n"

    def line_lengths(self):
        """The length in bytes of each line of a file opened with ``lines``, its line end left out."""
        lengths = np.diff(self._starts) - 1
        if self.lines and not self._last_line_ended:
            lengths[-1] += 1
        return lengths

    def line(self, number):
        """Line ``number`` (from 0) with its line end, of a file opened with ``lines``, read alone:
        the `LINE_BLOCK` blocks that hold it are read and each must still be the block checked at
        opening, so a search reads a few rows of a large file, not the whole file, and what it
        reads is still what was checked."""
        start, end = int(self._starts[number]), int(self._starts[number + 1])
        first, last = start // LINE_BLOCK, (end - 1) // LINE_BLOCK
        data = os.pread(self._file.fileno(), (last + 1 - first) * LINE_BLOCK, first * LINE_BLOCK)
        for block in range(first, last + 1):
            held = data[(block - first) * LINE_BLOCK : (block + 1 - first) * LINE_BLOCK]
            if hashlib.sha256(held).digest() != self._block_digests[block]:
                self._changed()
        return data[start - first * LINE_BLOCK : end - first * LINE_BLOCK]

    @property
    def size(self):
        """The file's size in bytes."""
        return os.fstat(self._file.fileno()).st_size

    def read_at(self, offset, length):
        """Up to ``length`` bytes from ``offset``, not hashed: for a header whose claims are
        checked before a reader trusts them (the reader then reads through `reading`)."""
        return os.pread(self._file.fileno(), length, offset)

    def mapped(self, offset, dtype, shape):
        """A read-only array of ``shape`` and ``dtype`` from ``offset``, mapped from the checked
        descriptor (a file renamed over the name changes nothing mapped): for rows read a few at
        a time from a file too large to hold, whose sha256 was checked at opening; the caller
        checks the rows it reads (content written over in place since is not hashed again)."""
        return np.memmap(self._file, dtype=dtype, mode="r", offset=offset, shape=shape)

    @contextlib.contextmanager
    def reading(self):
        """A buffered binary stream of the file from its first byte; leaving the block reads what
        the reader left and refuses content that is no longer the checked one (a reader that
        failed on such content is refused the same way)."""
        raw = _Hashing(self._file.fileno())
        try:
            yield io.BufferedReader(raw, BLOCK)
        except Exception:
            self._refuse_changed(raw)
            raise
        self._refuse_changed(raw)

    def read(self):
        """The whole file as `NamedBytes`, its sha256 checked again on these very bytes; no more
        than its ``limit`` is read (one that grew past it since opening is refused)."""
        with self.reading() as stream:
            data = stream.read(self.limit[0] + 1 if self.limit else -1)
            if self.limit and len(data) > self.limit[0]:  # it was no larger when checked
                self._changed()
        return NamedBytes(data, os.path.join(self.where, self.name))

    def _refuse_larger(self, size):
        size_limit, holder = self.limit
        raise DataError(
            "%s: %s holds %d bytes, more than %s can (%d)" % (self.where, self.name, size, holder, size_limit)
        )

    def _refuse_changed(self, raw):
        """Refuse content that is not the checked one: a file of another size at once (the rest
        of a file grown by gigabytes since is not read to say so), else by its sha256, the rest
        of the checked size read."""
        if self.size != self._checked_size or raw.rest() != self.sha256:
            self._changed()

    def _changed(self):
        raise DataError(
            "%s: %s changed after it was checked against %s: the directory is being written "
            "over; use it once that is done" % (self.where, self.name, self.record)
        )


#: The blocks a file opened with ``lines`` is checked in when one line is read (`CheckedFile.line`):
#: a line costs reading and hashing the blocks that hold it.
LINE_BLOCK = 64 << 10


class _Hashing(io.RawIOBase):
    """A file descriptor read from its first byte by offset (``pread``: readers of one
    descriptor cannot move each other), hashing what it gives; with ``lines``, also where each
    line starts and the sha256 of each `LINE_BLOCK` (`line_index`)."""

    def __init__(self, descriptor, lines=None):
        super().__init__()
        self.descriptor, self.offset, self.digest = descriptor, 0, hashlib.sha256()
        self.line_ends, self.last = 0, b""  # line ends seen, and the last byte read
        self._most_lines = lines
        self._line_ends, self._block_digests, self._block = (
            ([], [], hashlib.sha256()) if lines is not None else (None,) * 3
        )

    def _seen(self, data):
        if self._line_ends is not None and self.line_ends <= self._most_lines:  # past it: no index kept
            self._index(data)
        self.offset += len(data)
        self.digest.update(data)
        if data:
            self.line_ends += data.count(b"\n")
            self.last = data[-1:]

    def _index(self, data):
        self._line_ends.append(self.offset + np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n")))
        view, offset = memoryview(data), self.offset
        while view:
            part = view[: LINE_BLOCK - offset % LINE_BLOCK]
            self._block.update(part)
            view, offset = view[len(part) :], offset + len(part)
            if offset % LINE_BLOCK == 0:
                self._block_digests.append(self._block.digest())
                self._block = hashlib.sha256()

    def line_index(self):
        """``(starts, block digests)`` of the whole file read: the offset where each line starts,
        then the file's size; the sha256 of each `LINE_BLOCK` (the last one's, however short).
        ``(None, None)`` without ``lines``, or for a file of more lines: an index of a file of line
        ends alone would take eight times its size."""
        if self._line_ends is None or self.line_ends > self._most_lines:
            return None, None
        digests = self._block_digests + ([self._block.digest()] if self.offset % LINE_BLOCK else [])
        starts = np.concatenate([[0], *(ends + 1 for ends in self._line_ends)]).astype(np.int64)
        if starts[-1] != self.offset:  # a last line without its line end
            starts = np.append(starts, self.offset)
        return starts, digests

    def readable(self):
        return True

    def readinto(self, buffer):
        data = os.pread(self.descriptor, len(buffer), self.offset)
        buffer[: len(data)] = data
        self._seen(data)
        return len(data)

    def rest(self):
        """The sha256 of the whole file, once the part not read yet is read."""
        for block in iter(lambda: os.pread(self.descriptor, BLOCK, self.offset), b""):
            self._seen(block)
        return self.digest.hexdigest()


class NamedBytes(io.BytesIO):
    """Bytes read from a checked file, named by it: readers that take a path or a binary stream
    (``np.load`` in `Whitening.load`, `Flow.load`) read these bytes and name the file in their
    messages (``"%s" % path``)."""

    def __init__(self, data, name):
        super().__init__(data)
        self.name = name

    def __str__(self):
        return self.name

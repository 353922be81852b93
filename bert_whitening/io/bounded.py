"""Sizes checked before they are allocated: the limits on what the package reads, and the readers
that keep to them. numpy only.

What a file claims about itself (a configuration's sizes, a ``.npy`` header's shape, a zip
member's inflated size) is checked against these limits and against what the reader expects
before anything of that size is allocated or inflated, and text is read in bounded pieces. So a
wrong or crafted file (a configuration saying a million hidden units, a zip bomb, ``/dev/zero``,
a FIFO nobody writes to) is refused in bounded time and memory, by a one-line error naming it,
instead of filling the memory or waiting for ever. What the process itself may hold
(`usable_memory`: physical memory, ``ulimit -v``, cgroup limits) bounds what a batch or a model's
weights may take.
"""

import dataclasses
import io
import math
import os
import re
import resource
import stat
import tokenize
import zipfile
import zlib

import numpy as np

from bert_whitening.io.atomic import file_kind

#: Bytes read at a time from a file of any size: what a reader holds besides what it returns.
BLOCK = 1 << 20
#: A JSON configuration or record (``bert_config.json``, ``config.json``, ``sentence_encoder.json``,
#: an index's ``index.json``, an export's record, the metadata in a whitening or flow ``.npz``):
#: real ones hold a few kilobytes.
JSON_BYTES = 1 << 20
#: A ``vocab.txt``: room for the largest vocabulary `MODEL_SIZES` allows.
VOCAB_BYTES = 64 << 20
#: A TensorFlow checkpoint index (``.index``): a few hundred bytes per variable.
INDEX_BYTES = 64 << 20
#: The JSON header of a ``model.safetensors`` (what each tensor is and where its bytes lie): a
#: hundred bytes or so per tensor; safetensors itself refuses a header above 100,000,000 bytes.
SAFETENSORS_HEADER_BYTES = 64 << 20
#: One line of an input file (a sentence, or a pair with its label), without its line end: far
#: longer than anything a model reads (it keeps ``maxlen`` tokens), short enough to hold at once.
LINE_BYTES = 1 << 20
#: A CA file a TLS client trusts (``ca_file``, PEM or DER): a system's whole bundle of
#: certificates holds a few hundred kilobytes.
CA_FILE_BYTES = 16 << 20

#: The largest size each key of a BERT configuration may give: beyond those of any released
#: BERT, below what would not fit a machine. The weights must match them as well
#: (`bert_whitening.checkpoints.ModelFiles.check_sizes`), so no model larger than its
#: checkpoint is built.
MODEL_SIZES = {
    "vocab_size": 1 << 22,
    "hidden_size": 8192,
    "embedding_size": 8192,
    "num_hidden_layers": 128,
    "num_attention_heads": 256,
    "intermediate_size": 1 << 16,
    "max_position_embeddings": 1 << 16,
    "type_vocab_size": 1024,
}
#: The largest shape a BERT-flow configuration may give: far beyond BERT-flow's own (2-3 levels of
#: 2-3 steps, 16-32 wide).
FLOW_SIZES = {"n_levels": 16, "depth": 64, "coupling_width": 4096}
#: The most a flow's weights may take (a flow without ``permutation`` holds a square matrix per
#: step).
FLOW_BYTES = 1 << 30
#: The most weights one step of a flow holds (`bert_whitening.flow.FlowConfig.weight_shapes`: its
#: actnorm's two, an invertible convolution's five without ``permutation``, its coupling's nine),
#: so the most arrays a flow file holds besides its metadata.
FLOW_WEIGHTS_PER_STEP = 16
#: The keys every BERT configuration gives.
REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def check_model_sizes(config, path, error):
    """Refuse a configuration whose sizes are missing, not positive whole numbers, above
    `MODEL_SIZES`, or heads that do not split the hidden size, before anything is built from
    them."""
    missing = [key for key in REQUIRED_SIZES if key not in config]
    if missing:
        raise error("%s lacks %s" % (path, ", ".join(missing)))
    for key, largest in MODEL_SIZES.items():
        value = config.get(key, 1)
        if type(value) is not int or not 1 <= value <= largest:
            raise error("%s: %s is %r, expected a whole number from 1 to %d" % (path, key, value, largest))
    if config["hidden_size"] % config["num_attention_heads"]:
        raise error(
            "%s: hidden_size %d is not a multiple of num_attention_heads %d: the heads split it evenly"
            % (path, config["hidden_size"], config["num_attention_heads"])
        )


def open_regular(path, error, what="file", limit=None, dir_fd=None):
    """A binary stream of the regular file ``path``, of at most ``limit`` bytes when given; a
    FIFO, a device or a directory is refused before it is read (opened without blocking: opening
    a FIFO waits for a writer). With ``dir_fd``, the file of ``path``'s name in the directory of
    that descriptor, whatever is at ``path`` now (`bert_whitening.io.files.OpenedDirectory`)."""
    try:
        descriptor = os.open(
            path if dir_fd is None else os.path.basename(path), os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except FileNotFoundError:
        raise error("%s: no such %s" % (path, what)) from None
    except OSError as error_:
        raise error("%s: cannot read the %s (%s)" % (path, what, error_.strerror)) from None
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode) or (limit is not None and found.st_size > limit):
        os.close(descriptor)
        if stat.S_ISREG(found.st_mode):
            raise error("%s: larger than %d bytes, too large for a %s" % (path, limit, what))
        kind = "directory" if stat.S_ISDIR(found.st_mode) else file_kind(found.st_mode)
        raise error("%s: a %s, not a regular file: cannot be read as a %s" % (path, kind, what))
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_limited(path, limit, error, what="file", dir_fd=None):
    """The bytes of the regular file ``path`` (under ``dir_fd``: `open_regular`), refused when it
    holds more than ``limit``; read a block at a time, as one read of ``limit`` bytes would
    allocate them all whatever it gets."""
    chunks, size = [], 0
    try:
        with open_regular(path, error, what, limit, dir_fd) as stream:
            while size <= limit and (chunk := stream.read(1 << 16)):
                chunks.append(chunk)
                size += len(chunk)
    except OSError as error_:
        raise error("%s: cannot read the %s (%s)" % (path, what, error_.strerror)) from None
    if size > limit:  # it grew since it was opened
        raise error("%s: larger than %d bytes, too large for a %s" % (path, limit, what))
    return b"".join(chunks)


#: The `numpy.lib.format` header readers by format version; numpy writes 1.0 unless a header
#: needs more room (2.0), or characters latin-1 lacks (3.0, read by `npy_header`).
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
#: The longest ``.npy`` header numpy reads (its ``max_header_size``).
NPY_HEADER_BYTES = 10000
#: What numpy's header parsing raises on a damaged header (`tokenize.TokenError` from its repr
#: parser, `SyntaxError` from ``ast``, a `TypeError` when it sorts keys of two types), and what a
#: damaged or cut zip member raises when read.
HEADER_ERRORS = (ValueError, TypeError, EOFError, SyntaxError, tokenize.TokenError)
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError)


def npy_header(stream):
    """``(shape, fortran, dtype)`` of the ``.npy`` header at ``stream``'s position, the stream
    left on the data's first byte; one of `HEADER_ERRORS` when it is not such a header or gives
    a negative size. The one reader of `NpzMembers` and `bert_whitening.io.files.npy_blocks`.

    The header's length is checked before the header is read: numpy reads as many bytes as a
    header claims (up to 4 GB in 2.0) before it compares them with its ``max_header_size``, and
    then refuses in three lines."""
    version = np.lib.format.read_magic(stream)
    if version not in _HEADER_READERS and version != (3, 0):
        raise ValueError(".npy format version %d.%d" % version)
    length = stream.read(2 if version == (1, 0) else 4)
    claimed = int.from_bytes(length, "little")
    if claimed > NPY_HEADER_BYTES:
        raise ValueError("a .npy header of %d bytes, more than the %d numpy reads" % (claimed, NPY_HEADER_BYTES))
    header = stream.read(claimed)
    if version == (3, 0):  # 2.0's layout in UTF-8: the same bytes when in ASCII, all a float matrix's header holds
        if not header.isascii():
            raise ValueError("a .npy 3.0 header beyond ASCII (field names of a structured array)")
        version = (2, 0)
    shape, fortran, dtype = _HEADER_READERS[version](io.BytesIO(length + header))
    if any(size < 0 for size in shape):
        raise ValueError("a negative size in its shape %s" % (shape,))
    return shape, fortran, dtype


#: What an ``.npz`` member may add to its array's bytes: its ``.npy`` header (at most
#: `NPY_HEADER_BYTES`) and its zip records (its local header, data descriptor and central
#: directory entry, with its name and zip64 sizes), with room for the archive's end records.
NPZ_MEMBER_BYTES = NPY_HEADER_BYTES + 1024


def npz_bytes(array_bytes, members):
    """The most an ``.npz`` of ``members`` arrays of ``array_bytes`` bytes together can take: a
    larger file holds something else, and is refused before it is read whole."""
    return array_bytes + members * NPZ_MEMBER_BYTES


def whitening_file_bytes(dim):
    """The most a whitening file of dimension ``dim`` can take: its kernel (``dim x dim``) and
    three vectors (bias, mean, eigenvalues) in the widest float `NpzMembers` reads, and its
    metadata."""
    return npz_bytes(np.dtype(np.longdouble).itemsize * (dim * dim + 3 * dim) + JSON_BYTES, 5)


#: The most a flow file can take: weights of at most `FLOW_BYTES` (float64, as a flow holds
#: them), as many arrays as the largest flow `FLOW_SIZES` allows has, and its metadata.
FLOW_FILE_BYTES = npz_bytes(
    FLOW_BYTES + JSON_BYTES, FLOW_SIZES["n_levels"] * FLOW_SIZES["depth"] * FLOW_WEIGHTS_PER_STEP + 1
)


def described(error):
    """What an exception says, or what it is when it says nothing (zipfile's ``EOFError()`` on a
    member cut short): a refusal never ends in an empty pair of parentheses."""
    return str(error) or {EOFError: "cut short"}.get(type(error), type(error).__name__)


_KIND_NAMES = {"f": "floats", "i": "integers", "U": "text"}

#: How much larger than its stored bytes a compressed member may inflate (a file's arrays take
#: about the room they take on disk): numbers as we write them compress little, a crafted array
#: (an identity of the largest dimension) thousands of times. Small members are exempt.
INFLATION_LIMIT, INFLATION_EXEMPT_BYTES = 4, 1 << 20


def first_few(items, shown=3):
    """The first ``shown`` of ``items`` and how many more there are: one line, however many."""
    more = " and %d more" % (len(items) - shown) if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _in_number_order(names):
    """``names`` sorted with their numbers compared as numbers (``kept_2`` before ``kept_10``)."""
    # Runs of ASCII digits (the odd parts) as numbers: "²" is a digit to str.isdigit, not to int.
    return sorted(
        names,
        key=lambda name: [int(part) if index % 2 else part for index, part in enumerate(re.split("([0-9]+)", name))],
    )


class NpzMembers:
    """The ``.npy`` members of an ``.npz`` file, each read on its own once its header says the
    shape and type asked for, and its zip entry says it inflates to exactly that array: a crafted
    header or a zip bomb is refused before its data is read. What the zip directory claims is
    bounded by the file's own size (each member's stored bytes and their sum at most the file's,
    its inflated bytes at most `INFLATION_LIMIT` times its stored ones), and a member is read a
    block at a time rather than into room made for its claimed size, so a small file cannot make
    a large allocation before the caller compares its sizes with a model's. Errors are one line,
    an ``error`` naming ``path`` (the file being a ``what``) and the member at fault."""

    def __init__(self, path, error, what):
        """``path``: a file's path, or a binary stream of bytes already read and checked (an
        index directory's `bert_whitening.io.files.NamedBytes`)."""
        self.path, self.error, self.what = path, error, what
        self._stream = path if isinstance(path, io.IOBase) else open_regular(path, error, what)
        try:
            self._zip = zipfile.ZipFile(self._stream)
        except (ValueError, *ZIP_ERRORS) as error_:
            self._stream.close()
            raise error("%s: not a readable %s (not an .npz archive: %s)" % (path, what, described(error_))) from None
        try:
            self._members = self._checked_members()
        except BaseException:
            self.close()
            raise

    def _checked_members(self):
        """``{name: ZipInfo}`` of the ``.npy`` members, each one's claimed sizes within the file's."""
        size = self._stream.seek(0, io.SEEK_END)
        members, stored = {}, 0
        for info in self._zip.infolist():
            if not info.filename.endswith(".npy") or not info.filename.isprintable():  # named in one line
                self._refuse("it holds %r, which is not an array" % info.filename)
            name = info.filename[: -len(".npy")]
            if name in members:
                self._refuse("it holds %s twice" % info.filename)
            if info.compress_size > size:
                self._refuse(
                    "%s claims %d stored bytes, the whole file holds %d: crafted or cut short"
                    % (info.filename, info.compress_size, size)
                )
            if info.file_size > max(INFLATION_LIMIT * info.compress_size, INFLATION_EXEMPT_BYTES):
                self._refuse(
                    "%s inflates from %d to %d bytes, more than %d times: crafted, not written by bert-whitening"
                    % (info.filename, info.compress_size, info.file_size, INFLATION_LIMIT)
                )
            stored += info.compress_size
            members[name] = info
        if stored > size:  # members that overlap: each claims bytes of the others
            self._refuse(
                "its members claim %d stored bytes together, the whole file holds %d: crafted" % (stored, size)
            )
        return members

    def _refuse(self, reason):
        raise self.error("%s: not a %s, %s" % (self.path, self.what, reason))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._zip.close()
        self._stream.close()

    @property
    def names(self):
        return set(self._members)

    def expect(self, names):
        """Refuse a file whose arrays are not exactly ``names``."""
        missing, unexpected = set(names) - self.names, self.names - set(names)
        if missing:
            self._refuse("missing %s" % first_few(_in_number_order(missing)))
        if unexpected:
            self._refuse("unexpected arrays %s" % first_few(_in_number_order(unexpected)))

    def array(self, name, shape=None, kinds="f", limit=None):
        """The array ``name``, refused before its data is read unless its shape is ``shape``
        (when given), its dtype of one of the numpy ``kinds``, and it holds at most ``limit``
        bytes (when given)."""
        with self._open(name) as stream:
            found, dtype, fortran = self._header(name, stream)
            if shape is not None and found != tuple(shape):
                raise self.error("%s: %s has shape %s, expected %s" % (self.path, name, found, tuple(shape)))
            if dtype.kind not in kinds:
                expected = " or ".join(_KIND_NAMES[kind] for kind in kinds)
                raise self.error("%s: %s holds %s, expected %s" % (self.path, name, dtype, expected))
            size = math.prod(found) * dtype.itemsize
            if limit is not None and size > limit:
                raise self.error(
                    "%s: %s holds %d bytes, more than the %d a %s holds" % (self.path, name, size, limit, self.what)
                )
            data = self._read(name, stream, size)
        return np.frombuffer(data, dtype).reshape(found, order="F" if fortran else "C")

    def _read(self, name, stream, size):
        """The ``size`` bytes of a member's data, read a block at a time: room is made for what
        arrives, not for what the zip entry claims (a member cut short stops early)."""
        data = bytearray()
        try:
            while len(data) < size and (block := stream.read(min(BLOCK, size - len(data)))):
                data += block
            complete = len(data) == size and not stream.read(1)  # the read after the end checks the CRC
        except ZIP_ERRORS as error_:
            raise self._unreadable(name, error_) from None
        if not complete:
            raise self.error("%s: %s is not the size its header says" % (self.path, name))
        return data

    def _unreadable(self, name, error_):
        return self.error("%s: not a readable %s (%s: %s)" % (self.path, self.what, name, described(error_)))

    def _open(self, name):
        try:
            return self._zip.open(self._members[name])
        except (ValueError, RuntimeError, *ZIP_ERRORS) as error_:  # RuntimeError: encrypted
            raise self._unreadable(name, error_) from None

    def _header(self, name, stream):
        """``(shape, dtype, fortran)`` of a member, checked against its zip entry's inflated size."""
        try:
            shape, fortran, dtype = npy_header(stream)
        except (*HEADER_ERRORS, *ZIP_ERRORS) as error_:
            raise self._unreadable(name, error_) from None
        if dtype.hasobject:
            raise self.error("%s: %s holds Python objects, which are never read" % (self.path, name))
        expected = stream.tell() + math.prod(shape) * dtype.itemsize
        if self._members[name].file_size != expected:
            raise self.error(
                "%s: %s inflates to %d bytes, its header (shape %s of %s) says %d"
                % (self.path, name, self._members[name].file_size, shape, dtype, expected)
            )
        return shape, dtype, fortran


@dataclasses.dataclass(frozen=True)
class MemoryLimit:
    """An amount of memory and what sets it (``source``, with ``{}`` where the amount goes), so
    that a refusal says which limit it met."""

    bytes: int
    source: str

    def __str__(self):
        return self.source.format("%.1f GB" % (self.bytes / 1e9))


#: Where the kernel names this process's cgroups, a line per hierarchy: ``ID:CONTROLLERS:PATH``.
_OWN_CGROUPS = "/proc/self/cgroup"
#: Where a cgroup's memory limit is kept, by the controller that names the process's group in
#: `_OWN_CGROUPS`: cgroup v2's (an empty name; ``max`` is no limit) and v1's memory
#: controller (no limit is a number near 2**63).
_CGROUP_MEMORY_FILES = {
    "": ("/sys/fs/cgroup", "memory.max"),
    "memory": ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
}


def usable_memory():
    """The `MemoryLimit` this process may use: the least of the machine's physical memory, the
    process's address-space limit (``ulimit -v``, RLIMIT_AS, when set) and the memory limit of
    its cgroup or of any cgroup above it (a container's): the physical memory alone let a batch
    through that the allocator then refused, deep in TensorFlow, with a long traceback."""
    limits = [MemoryLimit(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's {} of memory")]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(MemoryLimit(soft, "the {} this process may address (ulimit -v)"))
    limits += [MemoryLimit(size, "the {} of the cgroup memory limit in %s" % path) for path, size in _cgroup_limits()]
    return min(limits, key=lambda limit: limit.bytes)


def check_memory(what, needs, error, advice=""):
    """Refuse ``what`` (a phrase naming the work: "a model call of 64 sentences at maxlen 128")
    when what it holds at once, ``needs`` (``{what a part is: bytes}``, in the order said),
    adds up to more than `usable_memory`, before any of it is allocated: the one check of a size
    against memory, so that every refusal says what it counted and which limit it met. A part
    counts only the arrays the work is known to hold, so the sum is a lower bound: what it
    refuses cannot fit, and the allocator (deep in TensorFlow, FAISS or numpy, with a traceback
    or the kernel's OOM killer) is not met first. ``advice`` (what to change) ends the line."""
    total = sum(needs.values())
    memory = usable_memory()
    if total > memory.bytes:
        parts = ", ".join("%.1f GB %s" % (size / 1e9, part) for part, size in needs.items())
        raise error(
            "%s needs at least %.1f GB (%s), more than %s%s"
            % (what, total / 1e9, parts, memory, "; " + advice if advice else "")
        )


def _cgroup_limits():
    """``(file, bytes)`` of each memory limit set on this process's cgroups (v2, v1): in the
    group's directory as `_OWN_CGROUPS` names it, in each directory above it, and at the
    mount point (a container that mounts its own group there is named by the host's path)."""
    groups = dict.fromkeys(_CGROUP_MEMORY_FILES, "/")
    try:
        with open(_OWN_CGROUPS, encoding="utf-8") as stream:
            lines = stream.read(1 << 16).splitlines()
    except OSError:
        lines = []
    for line in lines:
        controllers, _, path = line.partition(":")[2].partition(":")
        groups.update((controller, path) for controller in controllers.split(",") if controller in groups)
    for controller, path in groups.items():
        mount, name = _CGROUP_MEMORY_FILES[controller]
        directory, directories = os.path.normpath(os.path.join(mount, path.lstrip("/"))), [mount]
        while directory.startswith(mount + os.sep):
            directories.append(directory)
            directory = os.path.dirname(directory)
        for directory in directories:
            limit = os.path.join(directory, name)
            try:
                with open(limit, "rb") as stream:
                    value = stream.read(64).strip()
            except OSError:
                continue
            if value.isdigit():
                yield limit, int(value)

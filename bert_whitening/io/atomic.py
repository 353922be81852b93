"""Writing outputs so that a failure or an interruption never leaves a half-written one, and
nothing is written over that the user did not name as the output.

What an output path may be (`check_outputs`, applied by `write_atomically` and called by
the commands before any work so they refuse at once):

- a regular file or a new name: written under a temporary name beside it, then renamed over it;
- a symbolic link: its final target is written the same way (the link stays a link, as GNU
  tools' ``--follow-symlinks`` do); a dangling link writes the file it names;
- a device, FIFO or socket: refused (``.npy`` and ``.npz`` need a regular, seekable file, and a
  rename would replace ``/dev/null`` itself);
- a directory where a file is expected: refused;
- the same file as one of the command's inputs (same device and inode, by any name), or a
  directory inside (or around) an input directory: refused, before anything is read;
- the same path as another output of the same run: refused;
- a prefix another live run writes files under (`claimed_prefix`): refused.

`check_outputs` is the one place these rules live: every command of `bert_whitening.cli` runs
it on all its outputs before any work (each command's `Paths`, `bert_whitening.commands.base`),
and so does every public writer
(`bert_whitening.sentence_encoder.SentenceEncoder`'s, `bert_whitening.evaluation.write_report`,
`bert_whitening.retrieval.search.build_index`, the export, the Beam pipelines, ``convert_hf``).

The temporary name says whose it is: ``.NAME.bert-whitening-tmp-PID-XXXXXXXX`` (a long ``NAME``
is shortened to stay within the file system's 255 bytes). The run that made it holds an
exclusive ``flock`` on it while it exists. A run killed with SIGKILL cannot remove its own; the
next run writing in that directory removes the temporaries whose lock it can take (`remove_stale`)
and leaves the others: a process id says nothing across PID namespaces (two containers sharing a
volume), a lock does. An ``OSError`` while writing (a full disk, say) is raised again naming the
target, never the temporary name.

What the libraries write to the temporary directory (TensorFlow's AutoGraph modules, which it
removes only at a normal exit; Beam's staging) goes to a directory of the command's own,
``TMPDIR/.command.bert-whitening-tmp-PID-XXXXXXXX`` (`private_temporary_directory`), removed
however the command ends, and by the next command when a SIGKILL left it.
"""

import contextlib
import ctypes
import errno
import fcntl
import glob
import hashlib
import logging
import os
import shutil
import signal
import stat
import tempfile
import threading
import time

from bert_whitening.errors import STOPPING, BertWhiteningError

logger = logging.getLogger(__name__)

#: The lists `placed_outputs` blocks are filling, innermost last.
_PLACED = []

MARK = ".bert-whitening-tmp-"
#: Bytes of the output's name kept in a temporary's name: with the mark, a PID and mkstemp's
#: suffix, the name stays under NAME_MAX (255).
NAME_BYTES = 160
#: A temporary younger than this is left alone even when unlocked: its run may not have taken
#: the lock yet (it does so right after creating it).
STALE_AFTER_SECONDS = 2.0


#: What an output path names (`check_outputs`): a file written in place (by rename), a directory
#: put in place whole, or replaced (an index, a converted model, a saved encoder, a trained
#: model, an export's ``BASE/N``), a directory kept, whose new entries are the outputs (an
#: export's ``BASE``: files in it may be inputs), or the prefix of files written beside it
#: (``beam-encode``'s shards, ``PREFIX-*-of-*``).
FILE, DIRECTORY, BASE, PREFIX = "file", "directory", "base", "prefix"

#: How deep `check_outputs` looks into an input directory for a file an existing output may be:
#: a model directory is flat, an evaluation data directory holds one directory per task.
INPUT_DEPTH = 2


def check_outputs(outputs, inputs=()):
    """Refuse, before any work, what a run must not write: the one guard every command and
    every public writer calls with all of its outputs and everything it reads, so a writer
    cannot forget one comparison (an ``eval --json`` once replaced its own data file).

    ``outputs`` are paths (files) or ``(path, kind)`` pairs (`FILE`, `DIRECTORY`, `PREFIX`);
    ``inputs`` are the files and directories the run reads. None (an output not asked for) and
    remote paths (``scheme://``, checked by their own file systems) are skipped, and so are
    inputs that do not exist (yet) and ``-``. An output is refused, in a one-line
    `BertWhiteningError` naming the path as given, when it:

    - is ``-`` or empty (``--output -`` would otherwise name a file ``-`` in the current
      directory: no output is written to standard output);

    - is a device, FIFO or socket (a rename would replace ``/dev/null`` itself), or a
      directory where a file is written;
    - is one of the inputs by any name (same device and inode: a symlink, ``./x``, a hard
      link; for an input ``-``, the file standard input is redirected from), or a file of an
      input directory;
    - is a directory inside an input directory, or holding an input (a model directory, an
      index, a file: replacing the directory would remove it), when it names a directory (a
      `BASE` only inside one: it is kept);
    - is the same path as another output of the run;
    - is a `PREFIX` that ends in a directory (``DIR/``, ``.``): its files would be named ``-00000...``;
    - lies in a directory that does not exist (a file output) or cannot be written.

    Returns the file to write for each output (a symlink's final target)."""
    given = [(item, FILE) if isinstance(item, (str, os.PathLike)) or item is None else tuple(item) for item in outputs]
    for path, _ in given:
        if path is not None and os.fspath(path) in ("", "-"):
            raise BertWhiteningError(
                "cannot write '%s': an output is a file or directory, never standard output or an empty name"
                % os.fspath(path)
            )
    given = [(os.fspath(path), kind) for path, kind in given if _local(path)]
    read = [(os.fspath(path),) * 2 for path in inputs if _local(path) and os.path.exists(path)]
    if any(path is not None and os.fspath(path) == "-" for path in inputs) and os.path.exists(STANDARD_INPUT):
        read.append(("- (standard input)", STANDARD_INPUT))  # redirected from a file: that file
    targets, seen = [], {}
    for path, kind in given:
        target = os.path.realpath(path) if os.path.islink(path) else path
        _check_kind(path, target, kind)
        _check_parent(path, target, kind)
        _check_inputs(path, target, kind, read)
        resolved = os.path.realpath(path)
        if resolved in seen:
            raise BertWhiteningError(
                "cannot write %s: it is also the output %s of this run; give each output a path of its own"
                % (path, seen[resolved])
            )
        seen[resolved] = path
        targets.append(target)
    return targets


def _local(path):
    return path is not None and os.fspath(path) not in ("", "-") and "://" not in os.fspath(path)


#: The longest file name (bytes) the file systems here take: a longer output name would fail
#: only at the final rename, after all the work.
NAME_MAX = 255


def _check_kind(path, target, kind):
    if kind == PREFIX and os.path.basename(path) in ("", os.curdir, os.pardir):
        raise BertWhiteningError(
            "cannot write %s: a prefix ends in a name its files begin with (DIR/vectors writes "
            "DIR/vectors-00000-of-NNNNN...), not in a directory" % path
        )
    if kind != PREFIX and len(os.fsencode(os.path.basename(os.path.abspath(target)))) > NAME_MAX:
        raise BertWhiteningError(
            "cannot write %s: its name is longer than %d bytes, the most a file system takes" % (path, NAME_MAX)
        )
    try:
        mode = os.stat(path).st_mode  # what the name reaches through its links (/proc/self/fd/N too)
    except (FileNotFoundError, NotADirectoryError):
        return  # a new name, or a dangling link: the file it names is written (under a file: `_check_parent`)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise BertWhiteningError("cannot write %s: its symbolic links make a loop" % path) from None
        raise
    if stat.S_ISDIR(mode):
        if kind == FILE:
            raise BertWhiteningError("cannot write %s: it is a directory" % path)
    elif not stat.S_ISREG(mode):
        raise BertWhiteningError(
            "cannot write %s: it is a %s, and outputs are written to regular files and "
            "directories (renamed into place)" % (path, file_kind(mode))
        )


def _check_parent(path, target, kind):
    """A file's directory must exist; a directory (or a prefix's files) may be created with its
    parents, below the nearest directory that exists. That one must be writable."""
    directory = existing = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise BertWhiteningError("cannot write %s: %s is not a directory" % (path, existing))
    if kind == FILE and existing != directory:
        raise BertWhiteningError("cannot write %s: no directory %s" % (path, directory))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BertWhiteningError("cannot write %s: directory %s is not writable" % (path, existing))


#: What standard input is, by a name that stats as it does (a file it is redirected from, say).
STANDARD_INPUT = "/proc/self/fd/0"


def _check_inputs(path, target, kind, inputs):
    """``inputs``: ``(name, path)`` of each input, ``name`` as a refusal shows it."""
    exists = os.path.exists(target)
    for shown, source in inputs:
        if exists and os.path.samefile(source, target):
            raise BertWhiteningError("cannot write %s: it is the input %s; choose another output" % (path, shown))
        if not os.path.isdir(source):
            if exists and kind == DIRECTORY and _within(os.path.realpath(source), os.path.realpath(target)):
                raise BertWhiteningError(  # replacing the directory would remove it
                    "cannot write %s: it holds the input %s; choose another output" % (path, shown)
                )
            continue
        if exists and kind == FILE:
            found = _file_of(source, os.stat(target))
            if found:
                raise BertWhiteningError(
                    "cannot write %s: it is %s, read from the input directory %s; choose another output"
                    % (path, found, source)
                )
        if kind in (DIRECTORY, BASE):
            inside, outside = os.path.realpath(target), os.path.realpath(source)
            if _within(inside, outside):
                raise BertWhiteningError(
                    "cannot write %s: it is inside the input directory %s; choose another output" % (path, source)
                )
            if kind == DIRECTORY and _within(outside, inside):
                raise BertWhiteningError(
                    "cannot write %s: it contains the input directory %s; choose another output" % (path, source)
                )


def _within(path, directory):
    return os.path.commonpath([path, directory]) == directory


def _file_of(directory, wanted, depth=INPUT_DEPTH):
    """The path of the file of ``directory`` (``depth`` levels down) that is ``wanted`` (an
    ``os.stat`` result), or None."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    for entry in entries:
        try:
            if entry.is_dir():
                found = _file_of(entry.path, wanted, depth - 1) if depth > 1 else None
                if found:
                    return found
                continue
            info = entry.stat()
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == (wanted.st_dev, wanted.st_ino):
            return entry.path
    return None


def check_output_directory(output, inputs=(), overwrite=False):
    """Refuse, before any work, a directory output the run must not write (`check_outputs`
    against ``inputs``), and one that exists unless ``overwrite`` (then it must be a directory,
    not a link to one: the exchange would replace the link): the one rule of every command and
    writer that puts a directory in place whole (`publish_directory`). Neither ``.`` or ``..``
    (nothing can be renamed onto them: the run failed at its very end) nor the directory the
    process is in, or one holding it, is replaced."""
    if os.path.basename(os.fspath(output).rstrip(os.sep)) in (os.curdir, os.pardir):
        raise BertWhiteningError("cannot write %s: name the directory itself, not . or .." % output)
    check_outputs([(output, DIRECTORY)], inputs)
    if os.path.lexists(output):
        if os.path.islink(output) or not os.path.isdir(output):  # no overwrite would make it one
            what = "a symbolic link; name the directory itself" if os.path.islink(output) else "not a directory"
            raise BertWhiteningError("cannot write %s: it is %s" % (output, what))
        if not overwrite:
            raise BertWhiteningError("%s already exists; pass overwrite (--overwrite) to replace it" % output)
        here, replaced = os.path.realpath(os.curdir), os.path.realpath(output)
        if here == replaced or here.startswith(replaced.rstrip(os.sep) + os.sep):
            raise BertWhiteningError(
                "cannot replace %s: it %s the current directory; run from elsewhere"
                % (output, "is" if here == replaced else "holds")
            )


def check_output(path, inputs=()):
    """The file to write for the output ``path`` (a symlink's final target): `check_outputs`
    of one file."""
    return check_outputs([path], inputs)[0]


def file_kind(mode):
    """The name of a file type that is neither a regular file nor a directory, for errors."""
    kinds = (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def _short_name(target):
    """The name of ``target`` as the names beside it carry it, shortened to stay within NAME_MAX."""
    name = os.path.basename(os.path.normpath(target))
    if len(os.fsencode(name)) > NAME_BYTES:
        name = "%s~%s" % (name[: NAME_BYTES // 4], hashlib.sha256(os.fsencode(name)).hexdigest()[:8])
    return name


def _prefix(target):
    parent = os.path.dirname(os.path.abspath(target))
    return parent, ".%s%s%d-" % (_short_name(target), MARK, os.getpid())


def kept_directory(target, suffix):
    """``(path, descriptor)`` of the directory ``.NAME{suffix}`` beside ``target``, created if
    missing (with the output's missing parents), and this run's exclusive lock on it; the
    descriptor is None when another run holds the lock. Unlike a temporary it is found again by
    its name alone (no PID) and `remove_stale` leaves it: a state a run keeps on purpose for a
    later run to take up (training's resumable state, `bert_whitening.training`)."""
    parent = os.path.dirname(os.path.abspath(target))
    path = os.path.join(parent, ".%s%s" % (_short_name(target), suffix))
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        mode = os.lstat(path).st_mode
        kind = "symbolic link" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else file_kind(mode)
        raise BertWhiteningError(
            "%s is a %s, where this run keeps its state in a directory of its own; remove it" % (path, kind)
        )
    os.makedirs(path, exist_ok=True)
    return path, _lock(path)


def _lock(path):
    """An open descriptor of ``path`` (a file or a directory) holding an exclusive lock on it,
    or None when another process holds one."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


#: The suffix of an output set aside while its replacement is renamed into place, where no
#: exchange is offered (`publish_directory`).
RETIRED = ".retired"


@contextlib.contextmanager
def _signals_held():
    """SIGINT, SIGTERM and SIGHUP held back while the block runs, and raised again after it: for
    steps that must not be parted (a handler raises between any two bytecodes). Python runs its
    handlers in the main thread alone, so elsewhere there is nothing to hold (and masking the
    main thread would not do: the kernel hands a signal to any thread that takes it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = {number: signal.signal(number, lambda number, frame: pending.append(number)) for number in STOPPING}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)  # None: set from C
        for number in pending:
            signal.raise_signal(number)


def remove_stale(target):
    """Remove the temporaries beside ``target`` (of any name in its directory) that no live run
    holds locked. An output set aside (`RETIRED`) by a run killed before its replacement took
    its place is put back at ``target`` when that is its own and ``target`` is missing, and left
    alone when it is another output's: only that output's run can tell."""
    parent = os.path.dirname(os.path.abspath(target))
    own = ".%s%s" % (_short_name(target), MARK)
    for path in glob.glob(os.path.join(glob.escape(parent), ".*%s*-*" % MARK)):
        try:
            info = os.lstat(path)
            changed = info.st_ctime if path.endswith(RETIRED) else info.st_mtime  # a rename sets ctime alone
            if time.time() - changed < STALE_AFTER_SECONDS:
                continue
            if path.endswith(RETIRED):
                if not os.path.basename(path).startswith(own):
                    continue
                if not os.path.lexists(target):
                    os.rename(path, target)
                    logger.warning("%s put back from %s, where a run replacing it was killed", target, path)
                    continue
            descriptor = _lock(path)
        except OSError:  # gone meanwhile, or not ours to open
            continue
        if descriptor is None:
            continue  # a live run holds it
        try:
            logger.info("removing %s, left by an interrupted run", path)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):  # another run's cleanup came first
                    os.unlink(path)
        finally:
            os.close(descriptor)


def _named(error, target, temporary):
    """``error`` about ``temporary`` (or no file) re-raised about ``target``."""
    about_temporary = error.filename is None if isinstance(error, OSError) else False
    if isinstance(error, OSError) and isinstance(error.filename, str):
        about_temporary = error.filename.startswith(temporary)
    if about_temporary and error.errno:
        return OSError(error.errno, "cannot write %s: %s" % (target, os.strerror(error.errno)))  # the path once
    return error


@contextlib.contextmanager
def placed_outputs():
    """A list that fills, while the block runs, with each output put in place in full
    (`write_atomically`, `publish_directory`, `mark_placed`), in order: what a command stopped by
    a signal can say it wrote, where it would otherwise say it wrote nothing."""
    placed = []
    _PLACED.append(placed)
    try:
        yield placed
    finally:
        _PLACED.pop()  # blocks nest: this one is innermost


def mark_placed(path):
    """Add ``path`` to every `placed_outputs` list being filled: for outputs put in place by
    others (Beam's sinks)."""
    for placed in _PLACED:
        if path not in placed:
            placed.append(path)


def write_atomically(path, write, inputs=(), output=True):
    """Call ``write(temporary_path)`` for a file beside ``path`` (or beside a symlink's target),
    then rename it into place; ``path`` is checked first (`check_output`, against ``inputs``).

    A failure or an interruption leaves ``path`` as it was and removes the temporary file.
    ``output=False`` is for a file the run replaces as it goes (a training state), which is not
    an output it wrote (`placed_outputs`).
    """
    target = check_output(path, inputs)
    directory, prefix = _prefix(target)
    remove_stale(target)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=prefix)
    os.close(handle)
    with _held_temporary(directory, temporary, path, _unlink_if_there):
        os.chmod(temporary, 0o666 & ~_umask())  # what open() would give, not mkstemp's 0600
        write(temporary)
        os.replace(temporary, target)
        if output:
            mark_placed(path)


@contextlib.contextmanager
def _held_temporary(directory, temporary, output, remove):
    """While the block runs, ``temporary`` (in ``directory``) locked as this run's and its
    directory held open; if the block raises, ``remove(name, dir_fd)`` takes the temporary away
    through the directory held (so also when it was renamed meanwhile), and the error is named
    for ``output`` (`_named`): what `write_atomically` and `staged_directory` both do."""
    lock, held = _lock(temporary), os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield
    except BaseException as error:
        remove(os.path.basename(temporary), held)
        named = _named(error, output, temporary)
        if named is error:
            raise
        raise named from None
    finally:
        os.close(lock)
        os.close(held)


def _unlink_if_there(name, dir_fd):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def _remove_tree(name, dir_fd):
    shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)


def write_stream_atomically(path, write, **options):
    """`write_atomically` of a ``write(stream)`` that writes to a binary stream (an ``.npz``)."""

    def to_file(temporary):
        with open(temporary, "wb") as stream:
            write(stream)

    write_atomically(path, to_file, **options)


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2  # renameat2(2) flags
_AT_FDCWD = -100


def _renameat2(source, target, flags):
    """Linux's ``renameat2(source, target, flags)``: False where the C library or the file
    system does not have it (the caller falls back), an OSError naming ``target`` if it fails."""
    rename = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if rename is None:
        return False
    if rename(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), target)


class OutputAppeared(BertWhiteningError):
    """The output exists by the time the run would put its own in place, though it did not when
    the run started (another run, or the user, made it meanwhile): it is left as it is."""


def publish_directory(staging, target, overwrite=False):
    """Rename the filled ``staging`` (`staged_directory`) to ``target``, in one step.

    The check at a command's start does not hold for its whole run: another run, or the user,
    may make ``target`` meanwhile, and a plain rename would replace an empty directory without a
    word. So without ``overwrite`` the rename is refused (`OutputAppeared`) if ``target`` exists
    by then, whatever it is. With ``overwrite`` the two are exchanged, so that ``target`` names
    the old output or the new one at every moment, even under a signal; the old one, now under
    the staging name, is removed next (or by `remove_stale`, if the run is killed first). Where
    no exchange is offered (NFS, some FUSE file systems), the old one steps aside
    (``STAGING.retired``), the new one takes its place and, should that fail, the old one comes
    back; a run killed between the two renames leaves the old one aside, and the next run writing
    the same output puts it back (`remove_stale`)."""
    if overwrite:
        try:
            exchanged = _renameat2(staging, target, _RENAME_EXCHANGE)
        except FileNotFoundError:  # nothing at ``target`` to exchange with
            exchanged = False
        if not exchanged and os.path.lexists(target):  # no exchange here: the old one steps aside first
            retired = staging + RETIRED
            with _signals_held():  # the two renames are not parted by a signal
                os.rename(target, retired)
                try:
                    os.rename(staging, target)
                except OSError:
                    os.rename(retired, target)  # the old one back: the output is never missing
                    raise
            staging, exchanged = retired, True
        if exchanged:
            mark_placed(target)
            if os.path.isdir(staging) and not os.path.islink(staging):
                shutil.rmtree(staging)
            else:
                os.unlink(staging)
            return
    try:
        if not _renameat2(staging, target, _RENAME_NOREPLACE):
            if os.path.lexists(target):  # no such rename here: checked, then renamed
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target)
            os.rename(staging, target)
        mark_placed(target)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR) and os.path.lexists(target):
            raise OutputAppeared(
                "%s was made while this run worked (by another run, or by hand): left as it is, and "
                "nothing written; remove it or choose another output" % target
            ) from None
        raise


@contextlib.contextmanager
def staged_directory(target):
    """A new empty directory beside ``target`` for the caller to fill and put in place
    (`publish_directory`).

    It gets the permissions ``mkdir`` would give (``mkdtemp``'s 0700 would hide a served model
    from the server's user). If the block raises, it is removed, and so are the parent
    directories this call created (a failed first export leaves no empty model base).
    """
    parent, prefix = _prefix(target)
    with _parents_made(parent):
        remove_stale(target)
        staging = tempfile.mkdtemp(dir=parent, prefix=prefix)
        with _held_temporary(parent, staging, target, _remove_tree):
            os.chmod(staging, 0o777 & ~_umask())
            yield staging


#: The suffix of the file a run holds locked while it writes the files of a `PREFIX` (`claimed_prefix`).
CLAIM = ".claim"


@contextlib.contextmanager
def claimed_prefix(prefix):
    """This run's claim on the files of ``prefix`` (a local `PREFIX`) while the block runs: a
    temporary ``.NAME.bert-whitening-tmp-PID-XXXXXXXX.claim`` beside them, locked. Another run
    that claims the same prefix meanwhile is refused in one line: each run's files are renamed
    into place whole, but files of two sets under one prefix make neither set. Inside the block
    no other live run writes there, so what Beam's sink left there is a killed run's to remove;
    it is given True, and False for a remote prefix (no claim: its file system has no locks).

    Each run takes its own lock before it looks at the others' claims, so of two starting
    together at least one sees the other's (both may be refused, never both let through). The
    directories this call creates are removed again if the block raises and they are empty."""
    if not _local(prefix):  # a remote file system has no locks to take
        yield False
        return
    parent, name = _prefix(prefix)
    with _parents_made(parent):
        remove_stale(prefix)  # a killed run's claim, unlocked
        handle, claim = tempfile.mkstemp(dir=parent, prefix=name, suffix=CLAIM)
        fcntl.flock(handle, fcntl.LOCK_EX)  # waits out another run's look at this claim
        try:
            own = glob.escape(os.path.join(parent, ".%s%s" % (_short_name(prefix), MARK)))
            for other in set(glob.glob(own + "*" + CLAIM)) - {claim}:
                try:
                    descriptor = _lock(other)
                except FileNotFoundError:  # ended meanwhile
                    continue
                if descriptor is None:
                    raise BertWhiteningError(
                        "cannot write %s: another run writes it now (%s); wait for it or choose another output"
                        % (prefix, other)
                    )
                os.close(descriptor)
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(claim)
            os.close(handle)


@contextlib.contextmanager
def _parents_made(directory):
    """``directory`` made with its missing parents for the block; those this call made are
    removed again if the block raises and they are empty (a failed first export leaves no empty
    model base)."""
    created = _missing_parents(directory)
    os.makedirs(directory, exist_ok=True)
    try:
        yield
    except BaseException:
        for made in created:
            with contextlib.suppress(OSError):
                os.rmdir(made)  # only if still empty
        raise


@contextlib.contextmanager
def private_temporary_directory():
    """A new directory in the system's temporary directory, made the temporary directory of this
    process (``tempfile.tempdir``) and of the processes it starts (``TMPDIR``) while the block
    runs, then removed with everything in it, and the previous ones restored.

    TensorFlow writes a module per function AutoGraph converts (``__autograph_generated_file*.py``)
    and removes them at exit (``atexit``), which an interrupted command skips (it ends with
    ``os._exit`` once cleaned up, `bert_whitening.cli.console_main`); so do Beam's temporary
    files. Here they go where the block's end removes them, on success, error or signal alike.
    A run killed with SIGKILL leaves its directory, locked as the staged outputs are, and the next
    run removes it (`remove_stale`)."""
    target = os.path.join(tempfile.gettempdir(), "command")
    parent, prefix = _prefix(target)
    remove_stale(target)
    directory = tempfile.mkdtemp(dir=parent, prefix=prefix)
    lock = _lock(directory)
    previous = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = directory
    try:
        yield directory
    finally:
        tempfile.tempdir = previous[0]
        if previous[1] is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = previous[1]
        shutil.rmtree(directory, ignore_errors=True)
        os.close(lock)


def _missing_parents(directory):
    """The directories ``os.makedirs(directory)`` would create, deepest first."""
    missing = []
    directory = os.path.abspath(directory)
    while not os.path.exists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return missing


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask

"""Writing outputs so that a failure or an interruption never leaves a half-written one.

Outputs are written under a temporary name beside the target and renamed into place. The
temporary name says whose it is: ``.NAME.bert-whitening-tmp-PID-XXXXXXXX``. A run killed with
SIGKILL cannot remove its own; the next run that writes the same target removes those whose
process is gone (`remove_stale`). An ``OSError`` while writing (a full disk, say) is raised again
naming the target, never the temporary name.
"""
import contextlib
import glob
import logging
import os
import shutil
import tempfile

logger = logging.getLogger(__name__)

MARK = ".bert-whitening-tmp-"


def _prefix(target):
    parent = os.path.dirname(os.path.abspath(target))
    return parent, ".%s%s%d-" % (os.path.basename(os.path.normpath(target)), MARK, os.getpid())


def remove_stale(target):
    """Remove the temporaries beside ``target`` (of any name in its directory) left by
    processes that no longer run."""
    parent = os.path.dirname(os.path.abspath(target))
    pattern = os.path.join(glob.escape(parent), ".*%s*-*" % MARK)
    for path in glob.glob(pattern):
        pid = path.rsplit(MARK, 1)[1].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            logger.info("removing %s, left by an interrupted run (process %s)", path, pid)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _named(error, target, temporary):
    """``error`` about ``temporary`` (or no file) re-raised about ``target``."""
    about_temporary = error.filename is None if isinstance(error, OSError) else False
    if isinstance(error, OSError) and isinstance(error.filename, str):
        about_temporary = error.filename.startswith(temporary)
    if about_temporary and error.errno:
        return OSError(error.errno, "cannot write %s: %s" % (target, error.strerror), target)
    return error


def write_atomically(path, write):
    """Call ``write(temporary_path)`` for a file beside ``path``, then rename it into place.

    A failure or an interruption leaves ``path`` as it was and removes the temporary file.
    """
    directory, prefix = _prefix(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(2, "cannot write %s: no directory %s" % (path, directory), path)
    remove_stale(path)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=prefix)
    os.close(handle)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # what open() would give, not mkstemp's 0600
        write(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        named = _named(error, path, temporary)
        if named is error:
            raise
        raise named from None


@contextlib.contextmanager
def staged_directory(target):
    """A new empty directory beside ``target`` for the caller to fill and rename into place.

    It gets the permissions ``mkdir`` would give (``mkdtemp``'s 0700 would hide a served model
    from the server's user), and it is removed if the block raises.
    """
    parent, prefix = _prefix(target)
    os.makedirs(parent, exist_ok=True)
    remove_stale(target)
    staging = tempfile.mkdtemp(dir=parent, prefix=prefix)
    try:
        os.chmod(staging, 0o777 & ~_umask())
        yield staging
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        named = _named(error, target, staging)
        if named is error:
            raise
        raise named from None


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask

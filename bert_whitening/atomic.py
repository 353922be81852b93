"""Writing outputs so that a failure or an interruption never leaves a half-written one."""
import contextlib
import os
import shutil
import tempfile


def write_atomically(path, write):
    """Call ``write(temporary_path)`` for a file beside ``path``, then rename it into place.

    A failure or an interruption leaves ``path`` as it was and removes the temporary file.
    """
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    os.close(handle)
    os.chmod(temporary, 0o666 & ~_umask())  # what open() would give, not mkstemp's 0600
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def staged_directory(target):
    """A new empty directory beside ``target`` for the caller to fill and rename into place.

    It gets the permissions ``mkdir`` would give (``mkdtemp``'s 0700 would hide a served model
    from the server's user), and it is removed if the block raises.
    """
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=".%s-" % os.path.basename(os.path.normpath(target)))
    os.chmod(staging, 0o777 & ~_umask())
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask

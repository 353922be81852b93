"""TF Serving's layout, ``BASE/N`` with ``N`` an integer version: which ``N`` an export writes,
and taking it. It imports no TensorFlow, so an export is refused (an existing version
without ``--overwrite``, a base that is a file) before TensorFlow is imported.

Concurrent exports to one ``BASE`` cannot collide: the version is taken by the final rename of
the staged export (`publish`), which never replaces a version that exists by then, of any kind
(`bert_whitening.atomic.publish_directory`). When the next free number was taken meanwhile, an
export without ``--version`` takes the one after; with ``--version`` it fails.
"""

import os

from bert_whitening.atomic import OutputAppeared, publish_directory
from bert_whitening.errors import ExportError


def target_version(base, version=None, overwrite=False):
    """The version to write: ``version``, or one more than the highest integer one in ``base``."""
    if os.path.exists(base) and not os.path.isdir(base):
        raise ExportError("export base %s is a file, not a directory" % base)
    existing = [int(name) for name in os.listdir(base) if name.isdigit()] if os.path.isdir(base) else []
    if version is None:
        return max(existing, default=0) + 1
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ExportError("version must be a non-negative integer (TF Serving's layout), got %r" % (version,))
    if version in existing and not overwrite:
        raise ExportError(
            "%s already exists; pass overwrite (--overwrite) to replace it" % os.path.join(base, str(version))
        )
    return version


def publish(staging, base, number, automatic, overwrite):
    """Rename ``staging`` to ``BASE/N`` and return that path. The rename fails when ``BASE/N``
    exists (another export may have taken it since `target_version` looked): then an automatic
    version moves on to the next free number, an explicit one is an error unless ``overwrite``,
    which swaps the old version out."""
    while True:
        target = os.path.join(base, str(number))
        try:
            publish_directory(staging, target, overwrite=overwrite and not automatic)
            return target
        except OutputAppeared:
            if not automatic:
                raise ExportError("%s already exists; pass overwrite (--overwrite) to replace it" % target) from None
        number += 1

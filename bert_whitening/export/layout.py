"""TF Serving's layout, ``BASE/N`` with ``N`` an integer version: which ``N`` an export writes,
and taking it. It imports no TensorFlow, so an export is refused (an existing version
without ``--overwrite``, a base that is a file) before TensorFlow is imported.

Concurrent exports to one ``BASE`` cannot collide: the version is taken by the final rename of
the staged export (`publish`), which never replaces a version that exists by then, of any kind
(`bert_whitening.io.atomic.publish_directory`). When the next free number was taken meanwhile, an
export without ``--version`` takes the one after; with ``--version`` it fails.
"""

import os
import re

from bert_whitening.arguments import MAX_VERSION, serving_version
from bert_whitening.errors import ExportError
from bert_whitening.io.atomic import OutputAppeared, check_output_directory, publish_directory

#: A version's name: ASCII digits only, as TF Serving reads them (``str.isdigit`` takes "²" and
#: "١", which ``int`` refuses or reads as another number).
_VERSION_NAME = re.compile("[0-9]+")


def target_version(base, version=None, overwrite=False, inputs=()):
    """The version to write: ``version``, or one more than the highest in ``base``; ``BASE/N``
    checked as the run's output against its ``inputs`` (`bert_whitening.io.atomic.check_output_directory`),
    so that an input inside a version ``overwrite`` replaces is refused, not removed with it.
    ``base`` itself is kept: files in it may be inputs."""
    if os.path.exists(base) and not os.path.isdir(base):
        raise ExportError("export base %s is a file, not a directory" % base)
    names = os.listdir(base) if os.path.isdir(base) else []
    existing = [int(name) for name in names if _VERSION_NAME.fullmatch(name) and int(name) <= MAX_VERSION]
    if version is None:
        version = max(existing, default=0) + 1
        if version > MAX_VERSION:
            raise ExportError("%s holds version %d, TF Serving's last: give --version" % (base, MAX_VERSION))
    else:
        version = serving_version(version, ExportError)
        if version in existing and not overwrite:
            raise ExportError(
                "%s already exists; pass overwrite (--overwrite) to replace it" % os.path.join(base, str(version))
            )
    check_output_directory(os.path.join(base, str(version)), inputs, overwrite)  # the one rule: never a link
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

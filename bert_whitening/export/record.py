"""An export's record, ``assets/bert_whitening.json``, and what binds the SavedModel to it: the
sha256 of every file the export wrote (``files``: ``saved_model.pb``, ``variables/...``, the
other assets), taken from the staged files after the save and before the verification.

`check_export` checks an export directory against its record; the export itself checks its
staging directory again once the verification ran (`bert_whitening.export.saved_model`). Files
added afterwards (TF Serving's ``assets.extra/`` warm-up requests, say) are not listed, and not
checked; any other file is refused, as an edit. No TensorFlow: checking an export does not
load it.
"""

import os

from bert_whitening.errors import DataError, ExportError
from bert_whitening.io.bounded import JSON_BYTES
from bert_whitening.io.files import CheckedFile, file_sha256_at, open_directory, read_limited_at
from bert_whitening.io.records import parse_json

#: The record's name inside an export directory.
RECORD = "assets/bert_whitening.json"


#: Files every SavedModel has: a record that lists neither binds nothing.
REQUIRED = ("saved_model.pb", "variables/variables.index")
#: Where TF Serving's warm-up requests go, added after the export: not listed, not checked.
EXTRA = "assets.extra/"


def file_digests(directory_fd, where):
    """``{name: sha256}`` of every file under the directory descriptor ``directory_fd`` but the
    record (which holds them), names relative to it with ``/``; a link or a FIFO in it is an
    error naming ``where``."""
    return {name: file_sha256_at(directory_fd, name, where) for name in _file_names(directory_fd)}


def _file_names(directory_fd):
    """The names of the files under ``directory_fd`` but the record, relative to it with ``/``."""
    return [
        name
        for top, _, files, _ in os.fwalk(".", dir_fd=directory_fd)
        for name in (os.path.normpath(os.path.join(top, file)) for file in files)
        if name != RECORD
    ]


def check_export(directory):
    """The record of the export in ``directory`` (a ``BASE/N``), once every file it lists is
    there with the sha256 it records. An `ExportError` naming the directory and the file
    otherwise: a variable file edited, truncated or copied from another export, a file missing,
    a record written by a version that listed no files."""
    try:
        descriptor = open_directory(directory)
    except DataError as error:
        raise ExportError(str(error)) from None
    try:
        return checked_export_record(descriptor, directory)
    except DataError as error:
        raise ExportError(str(error)) from None
    finally:
        os.close(descriptor)


def checked_export_record(directory_fd, where):
    """`check_export` of an export directory already open as ``directory_fd``."""
    text = read_limited_at(directory_fd, RECORD, JSON_BYTES, where)
    record = parse_json(text, "%s: %s" % (where, RECORD), ExportError)
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not all(isinstance(sha256, str) for sha256 in files.values()):
        raise ExportError(
            "%s: %s lists no sha256 of the SavedModel's files (exported by an earlier version?): "
            "export it again" % (where, RECORD)
        )
    missing = [name for name in REQUIRED if name not in files]
    if missing:
        raise ExportError("%s: %s lists no %s, which every SavedModel has" % (where, RECORD, missing[0]))
    for name, sha256 in files.items():
        CheckedFile(directory_fd, name, sha256, where, RECORD, "this export was written with")
    unlisted = sorted(name for name in _file_names(directory_fd) if name not in files and not name.startswith(EXTRA))
    if unlisted:
        raise ExportError(
            "%s: %s is not a file this export wrote (%s lists it not): the directory was edited"
            % (where, unlisted[0], RECORD)
        )
    return record

"""A checked directory's files are its own regular files, named inside it (numpy only: an export
record is checked without TensorFlow)."""

import hashlib
import json
import os
import tracemalloc

import pytest

from bert_whitening.errors import DataError, ExportError
from bert_whitening.export.record import RECORD, check_export, file_digests
from bert_whitening.io.files import CheckedFile, file_sha256_at, open_directory


@pytest.fixture
def export(tmp_path):
    """A directory laid out as an export, its record listing the sha256 of its files."""
    directory = tmp_path / "1"
    (directory / "variables").mkdir(parents=True)
    (directory / "assets").mkdir()
    (directory / "saved_model.pb").write_bytes(b"graph")
    (directory / "variables" / "variables.index").write_bytes(b"index")
    (directory / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    descriptor = open_directory(str(directory))
    try:
        files = file_digests(descriptor, str(directory))
    finally:
        os.close(descriptor)
    (directory / RECORD).write_text(json.dumps({"files": files}), encoding="utf-8")
    return directory


def test_the_record_lists_every_file_but_itself(export):
    assert sorted(check_export(str(export))["files"]) == [
        "saved_model.pb",
        "variables/variables.data-00000-of-00001",
        "variables/variables.index",
    ]


def test_a_name_outside_the_directory_is_refused(export, tmp_path):
    (tmp_path / "outside").write_bytes(b"elsewhere")
    files = json.loads((export / RECORD).read_text(encoding="utf-8"))["files"]
    files["../outside"] = hashlib.sha256(b"elsewhere").hexdigest()
    (export / RECORD).write_text(json.dumps({"files": files}), encoding="utf-8")
    with pytest.raises(ExportError, match=r"'../outside' is not a file name inside the directory"):
        check_export(str(export))


@pytest.mark.parametrize("linked", ["variables", "saved_model.pb"])
def test_a_symbolic_link_is_refused_though_its_target_has_the_recorded_bytes(export, tmp_path, linked):
    os.rename(export / linked, tmp_path / "moved")
    os.symlink(tmp_path / "moved", export / linked)
    with pytest.raises(ExportError, match=r"is a symbolic link \(%s\), not a regular file" % linked):
        check_export(str(export))


def test_a_missing_file_is_refused_naming_it(export):
    os.unlink(export / "variables" / "variables.index")
    with pytest.raises(ExportError, match=r"1: no variables/variables.index$"):
        check_export(str(export))


def test_a_record_that_binds_nothing_or_a_file_it_does_not_list_is_refused(export, tmp_path):
    record = json.loads((export / RECORD).read_text(encoding="utf-8"))
    (export / "saved_model.pbtxt").write_text("node {}", encoding="utf-8")  # TensorFlow would read either
    with pytest.raises(ExportError, match=r"1: saved_model.pbtxt is not a file this export wrote"):
        check_export(str(export))
    os.unlink(export / "saved_model.pbtxt")
    (export / "assets.extra").mkdir()
    (export / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"warm-up")  # TF Serving's: not ours
    assert check_export(str(export))["files"] == record["files"]
    (export / RECORD).write_text(json.dumps({"files": {}}), encoding="utf-8")
    with pytest.raises(ExportError, match=r"lists no saved_model.pb, which every SavedModel has$"):
        check_export(str(export))
    with pytest.raises(ExportError, match="not a directory"):
        check_export(str(export / "saved_model.pb"))


def test_a_record_that_lists_too_little_or_is_not_an_object_is_refused_and_assets_are_listed(export):
    """A SavedModel lists its variables' index too; values that are not sha256s bind nothing; a
    record that is not an object is refused in the same line, not a traceback; ``assets/`` is the
    export's own (only ``assets.extra/`` is TF Serving's)."""
    record = json.loads((export / RECORD).read_text(encoding="utf-8"))
    (export / "assets" / "added.txt").write_text("not exported", encoding="utf-8")
    with pytest.raises(ExportError, match=r"1: assets/added.txt is not a file this export wrote"):
        check_export(str(export))
    os.unlink(export / "assets" / "added.txt")
    os.unlink(export / "variables" / "variables.index")
    os.unlink(export / "variables" / "variables.data-00000-of-00001")
    only_the_graph = {"saved_model.pb": record["files"]["saved_model.pb"]}
    (export / RECORD).write_text(json.dumps({"files": only_the_graph}), encoding="utf-8")
    with pytest.raises(ExportError, match=r"lists no variables/variables.index, which every SavedModel has$"):
        check_export(str(export))
    for damaged in ({"files": {"saved_model.pb": 1}}, [{"files": only_the_graph}]):
        (export / RECORD).write_text(json.dumps(damaged), encoding="utf-8")
        with pytest.raises(ExportError, match=r"1: assets/bert_whitening.json lists no sha256 of the SavedModel's"):
            check_export(str(export))


def checked(directory, name, limit, sha256=None):
    """``name`` of ``directory`` opened as a `CheckedFile` of at most ``limit`` bytes, checked
    against ``sha256`` (by default its own, which reads it whole)."""
    descriptor = open_directory(str(directory))
    try:
        sha256 = sha256 or hashlib.sha256((directory / name).read_bytes()).hexdigest()
        return CheckedFile(
            descriptor, name, sha256, str(directory), "record", "recorded", (limit, "a file of that kind")
        )
    finally:
        os.close(descriptor)


def test_a_file_read_whole_is_read_up_to_its_limit_and_refused_beyond_it_before_it_is_hashed(tmp_path, monkeypatch):
    """A whitening.npz behind three sparse gigabytes was read whole to check its sha256."""
    from bert_whitening.io import files

    (tmp_path / "at").write_bytes(b"x" * 10)
    read = checked(tmp_path, "at", 10).read()
    assert read.getvalue() == b"x" * 10 and str(read) == str(tmp_path / "at")  # named for the reader's messages
    with open(tmp_path / "beyond", "wb") as stream:
        stream.truncate(3 << 30)  # sparse
    monkeypatch.setattr(files, "_Hashing", lambda *_: pytest.fail("a file beyond its limit was hashed"))
    with pytest.raises(DataError) as raised:
        checked(tmp_path, "beyond", 10, sha256="0" * 64)  # never compared: refused before hashing
    assert str(raised.value) == "%s: beyond holds %d bytes, more than a file of that kind can (10)" % (
        tmp_path,
        3 << 30,
    )


def test_a_file_that_grows_past_its_limit_after_it_was_checked_is_refused_when_read(tmp_path):
    (tmp_path / "grows").write_bytes(b"x" * 10)
    opened = checked(tmp_path, "grows", 10)
    with open(tmp_path / "grows", "ab") as stream:
        stream.write(b"y" * 100)
    with pytest.raises(DataError, match="grows changed after it was checked against record"):
        opened.read()


def lines_of(directory, name, most):
    descriptor = open_directory(str(directory))
    try:
        sha256 = hashlib.sha256((directory / name).read_bytes()).hexdigest()
        return CheckedFile(descriptor, name, sha256, str(directory), "record", "recorded", lines=most)
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("end", [b"", b"\n"], ids=["no last line end", "a last line end"])
def test_a_line_is_read_alone_from_the_blocks_checked_at_opening(tmp_path, monkeypatch, end):
    """A search read the whole keys and texts files for the few rows it shows: once per 8,192
    queries, and once for every search of an index opened from Python."""
    from bert_whitening.io import files

    monkeypatch.setattr(files, "LINE_BLOCK", 16)
    lines = [b"%d" % number * number for number in range(12)]  # 0 to 11 repeated: lines across blocks, and ""
    (tmp_path / "rows").write_bytes(b"\n".join(lines) + end)
    opened = lines_of(tmp_path, "rows", len(lines))
    assert opened.lines == len(lines)
    assert opened.line_lengths().tolist() == [len(line) for line in lines]
    assert [opened.line(number) for number in range(len(lines))] == [line + b"\n" for line in lines[:-1]] + [
        lines[-1] + end
    ]
    data = bytearray((tmp_path / "rows").read_bytes())
    data[40] ^= 0x01  # in block 2 (bytes 32-47), written over in place
    with open(tmp_path / "rows", "r+b") as stream:
        stream.write(data)
    for number, line in enumerate(lines):
        start = sum(len(before) + 1 for before in lines[:number])
        if start // 16 <= 2 <= (start + len(line)) // 16:
            with pytest.raises(DataError, match="rows changed after it was checked against record"):
                opened.line(number)
        else:
            assert opened.line(number).rstrip(b"\n") == line


def test_no_line_index_is_kept_of_a_file_of_more_lines_than_the_caller_takes(tmp_path):
    """A file of line ends alone would index at eight times its size: the caller refuses it by
    its line count, which is kept."""
    (tmp_path / "rows").write_bytes(b"\n" * 1000)
    opened = lines_of(tmp_path, "rows", 10)
    assert opened.lines == 1000
    assert opened._starts is None


def test_a_file_without_a_limit_is_read_whole(tmp_path):
    data = os.urandom(3 << 20)  # more than a block
    (tmp_path / "f").write_bytes(data)
    descriptor = open_directory(str(tmp_path))
    try:
        opened = CheckedFile(descriptor, "f", hashlib.sha256(data).hexdigest(), str(tmp_path), "record", "recorded")
    finally:
        os.close(descriptor)
    assert opened.read().getvalue() == data


def test_a_file_that_grows_by_far_after_it_was_checked_is_refused_having_read_no_more_than_its_limit(
    tmp_path, monkeypatch
):
    """A file grown by 3 GB since its check was hashed to its end to say it changed (10 s), read
    whole or a line at a time: another size says it at once."""
    from bert_whitening.io import files

    (tmp_path / "grows").write_bytes(b"x" * 10)
    (tmp_path / "rows").write_bytes(b"a\nb\n")
    opened, rows = checked(tmp_path, "grows", 10), lines_of(tmp_path, "rows", 2)
    os.truncate(tmp_path / "grows", 3 << 30)  # sparse
    os.truncate(tmp_path / "rows", 3 << 30)
    monkeypatch.setattr(files._Hashing, "rest", lambda self: pytest.fail("the growth was read"))
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="grows changed after it was checked against record"):
            opened.read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    with pytest.raises(DataError, match="rows changed after it was checked against record"):
        with rows.reading() as stream:
            assert stream.readline() == b"a\n"


def test_a_files_sha256_is_read_through_the_directory_and_a_missing_one_named(tmp_path):
    (tmp_path / "f").write_bytes(b"bytes")
    descriptor = open_directory(str(tmp_path))
    try:
        assert file_sha256_at(descriptor, "f", "the index") == hashlib.sha256(b"bytes").hexdigest()
        with pytest.raises(DataError) as raised:
            file_sha256_at(descriptor, "none", "the index")
    finally:
        os.close(descriptor)
    assert str(raised.value) == "the index: no none"


@pytest.mark.parametrize("name", ["", ".", "./f", "sub/./f", "sub//f", "sub/", "../f"])
def test_a_name_with_an_empty_or_dot_component_is_refused_though_it_would_open_a_file(tmp_path, name):
    """``./f`` and ``sub//f`` open files of the directory, but a record's name must be the one
    the file has: each is refused by name, before anything is opened."""
    from bert_whitening.io.files import open_regular_at

    (tmp_path / "f").write_bytes(b"bytes")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"bytes")
    descriptor = open_directory(str(tmp_path))
    try:
        with pytest.raises(DataError) as raised:
            open_regular_at(descriptor, name, "the index")
    finally:
        os.close(descriptor)
    assert str(raised.value) == "the index: %r is not a file name inside the directory" % name


def test_a_record_is_read_up_to_its_limit_and_refused_beyond_it_naming_the_directory(tmp_path):
    from bert_whitening.io.files import read_limited_at

    (tmp_path / "at").write_bytes(b"{}" * 5)
    (tmp_path / "beyond").write_bytes(b"{}" * 5 + b" ")
    descriptor = open_directory(str(tmp_path))
    try:
        assert read_limited_at(descriptor, "at", 10, "the export") == b"{}" * 5
        with pytest.raises(DataError) as raised:
            read_limited_at(descriptor, "beyond", 10, "the export")
    finally:
        os.close(descriptor)
    assert str(raised.value) == "the export: beyond is larger than 10 bytes: not the record it should be"


def test_a_line_that_ends_at_a_block_boundary_is_read_from_its_own_blocks_alone(tmp_path, monkeypatch):
    """The block after a line's end holds none of it: another line's block written over does not
    refuse it, and the last line of a file of whole blocks is read."""
    from bert_whitening.io import files

    monkeypatch.setattr(files, "LINE_BLOCK", 16)
    lines = [b"a" * 15, b"b" * 15]  # each line with its line end one block
    (tmp_path / "rows").write_bytes(b"\n".join(lines) + b"\n")
    opened = lines_of(tmp_path, "rows", 2)
    assert [opened.line(0), opened.line(1)] == [lines[0] + b"\n", lines[1] + b"\n"]
    with open(tmp_path / "rows", "r+b") as stream:
        stream.seek(20)
        stream.write(b"c")  # in the second line's block
    assert opened.line(0) == lines[0] + b"\n"
    with pytest.raises(DataError, match="rows changed after it was checked against record"):
        opened.line(1)


def test_a_directory_that_cannot_be_opened_is_named(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    for path, said in ((tmp_path / "none", "the directory does not exist"), (tmp_path / "file", "not a directory")):
        with pytest.raises(DataError) as raised:
            open_directory(str(path))
        assert str(raised.value) == "%s: %s" % (path, said)

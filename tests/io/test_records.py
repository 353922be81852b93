"""The one record reader (`bert_whitening.io.records`): what it gives back, and each refusal in
one line naming the file and the fault."""

import os

import numpy as np
import pytest

from bert_whitening.errors import BertWhiteningError, CheckpointError, DataError
from bert_whitening.io.files import CheckedFile, file_sha256, open_directory
from bert_whitening.io.records import (
    ANY,
    Schema,
    as_read,
    check_fields,
    fits,
    kind_name,
    parse_json,
    parse_record,
    read_record,
)

SCHEMA = Schema(required={"dim": int, "beta": (int, float), "name": str}, optional={"model": (dict, type(None))})


def test_a_valid_record_is_given_back_from_bytes_text_a_path_and_a_checked_file(tmp_path):
    data = b'{"dim": 4, "beta": 0.5, "name": "\xe4\xbb\x8a", "model": null, "extra": [1]}'
    expected = {"dim": 4, "beta": 0.5, "name": "今", "model": None, "extra": [1]}
    assert parse_record(data, SCHEMA, "r.json") == expected
    assert parse_record(data.decode("utf-8"), SCHEMA, "r.json") == expected
    path = tmp_path / "r.json"
    path.write_bytes(data)
    assert read_record(str(path), SCHEMA) == expected and read_record(path, SCHEMA) == expected
    descriptor = open_directory(str(tmp_path))
    try:
        checked = CheckedFile(descriptor, "r.json", file_sha256(str(path)), str(tmp_path), "a record", "made with")
    finally:
        os.close(descriptor)
    assert read_record(checked, SCHEMA) == expected
    assert parse_record(b'{"a": 1}', None, "r.json") == {"a": 1}  # no schema: any object
    assert parse_json(b"[1, null]", "x") == [1, None]  # a value of any kind, for what is not a record


@pytest.mark.parametrize(
    "data, message",
    [
        (b"{nope", r"^r.json is not valid JSON \(Expecting property name enclosed in double quotes"),
        (b'{"dim": 1, "dim": 2}', r"^r.json is not valid JSON \(the key 'dim' is given twice\)$"),
        (b'{"a": {"b": 1, "c": 2, "b": 3}}', r"^r.json is not valid JSON \(the key 'b' is given twice\)$"),
        (b'{"beta": NaN}', r"^r.json is not valid JSON \(NaN is not a JSON number\)$"),
        (b'{"beta": -Infinity}', r"^r.json is not valid JSON \(-Infinity is not a JSON number\)$"),
        (b'{"name": "\xff"}', r"^r.json is not valid JSON \('utf-8' codec can't decode byte 0xff"),
        (b"[" * 100_000 + b"]" * 100_000, r"^r.json is not valid JSON \(nested too deeply to be read\)$"),
        (b"1" * 5000, r"^r.json is not valid JSON \(Exceeds the limit"),
        (b"[1, 2]", r"^r.json: expected a JSON object, got list$"),
        (b'"text"', r"^r.json: expected a JSON object, got str$"),
        (b'{"beta": 1, "name": "a"}', r"^r.json has no 'dim'$"),
        (b'{"dim": "4", "beta": 1, "name": "a"}', r"^r.json: 'dim' is '4', expected int$"),
        (b'{"dim": 4.0, "beta": 1, "name": "a"}', r"^r.json: 'dim' is 4.0, expected int$"),
        (b'{"dim": true, "beta": 1, "name": "a"}', r"^r.json: 'dim' is True, expected int$"),
        (b'{"dim": 4, "beta": false, "name": "a"}', r"^r.json: 'beta' is False, expected int or float$"),
        (b'{"dim": 4, "beta": 1, "name": "a", "model": []}', r"^r.json: 'model' is \[\], expected dict or None$"),
    ],
)
def test_each_refusal_is_one_line_naming_the_file_and_the_fault(data, message):
    with pytest.raises(DataError, match=message) as refused:
        parse_record(data, SCHEMA, "r.json", DataError)
    assert "\n" not in str(refused.value) and refused.value.__context__ is None


def test_a_file_is_read_within_the_limit_and_named_as_what_it_is(tmp_path):
    with pytest.raises(CheckpointError, match=r"none.json: no such model file$"):
        read_record(str(tmp_path / "none.json"), error=CheckpointError, what="model file")
    os.mkfifo(tmp_path / "fifo.json")  # would block a reader that opened it as a file
    with pytest.raises(CheckpointError, match=r"fifo.json: a FIFO, not a regular file"):
        read_record(str(tmp_path / "fifo.json"), error=CheckpointError, what="model file")
    (tmp_path / "large.json").write_bytes(b" " * ((1 << 20) + 1))
    with pytest.raises(BertWhiteningError, match=r"large.json: larger than 1048576 bytes, too large for a record"):
        read_record(str(tmp_path / "large.json"))


def test_the_error_may_be_a_callable_that_raises_its_own():
    def refuse(problem):
        raise CheckpointError("model.safetensors: cannot read the tensors (%s)" % problem)

    with pytest.raises(CheckpointError, match=r"tensors \(its header is not valid JSON \(Expecting value"):
        parse_record(b"", None, "its header", refuse)


def test_a_kind_is_a_type_or_a_tuple_and_a_bool_is_no_number():
    assert fits(3, int) and fits(3, (int, float)) and fits(2.5, (int, float)) and not fits(2.5, int)
    assert not fits(True, int) and not fits(False, (int, float)) and fits(True, bool) and fits(True, (int, bool))
    assert fits(None, (dict, type(None))) and not fits({}, list) and fits([], list)
    assert fits(True, ANY) and fits(None, ANY) and fits({}, ANY)
    assert kind_name(int) == "int" and kind_name((dict, type(None))) == "dict or None" and kind_name(ANY) == "anything"
    record = {"dim": 4, "beta": 1, "name": "x"}
    assert check_fields(record, SCHEMA, "r") is record  # optional keys may be absent
    with pytest.raises(BertWhiteningError, match=r"^r: 'model' is 3, expected dict or None$"):
        check_fields({**record, "model": 3}, SCHEMA, "r")


def test_as_read_gives_what_a_record_reads_back():
    assert as_read({"a": (1, 2), 3: [np.float64(0.5)]}) == {"a": [1, 2], "3": [0.5]}
    with pytest.raises(BertWhiteningError, match="not valid JSON"):
        as_read({"a": float("nan")})  # a record written with NaN could not be read back

"""Types at the front door (`bert_whitening.arguments`): the public entry points refuse a str,
bytes or None where a list of sentences or files is expected, non-string items and ill-typed
counts, naming the argument, before any model is built."""

import array
import pathlib
import re

import numpy as np
import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.arguments import (
    MAX_SHARDS,
    MAX_VERSION,
    boolean,
    finite_number,
    id_lists,
    integer,
    is_finite_number,
    is_number,
    number,
    optional_integer,
    optional_path,
    path,
    path_list,
    positive_int,
    sentence_list,
    sentence_stream,
    serving_version,
    shard_count,
    shown,
    str_list,
    text,
)
from bert_whitening.encoding import encode, encode_ids, encode_stream, encode_together
from bert_whitening.errors import BertWhiteningError, FlowError

from helpers import SENTENCES

NOT_LISTS = [
    (
        "今天天气很好",
        "sentences must be a list of sentences (str), got str '今天天气很好' (one sentence: put it in a list)",
    ),
    (b"abc", "got bytes b'abc' (one sentence: put it in a list)"),
    (None, "sentences must be a list of sentences (str), got NoneType None"),
    (42, "got int 42"),
    (np.array("abc"), "got ndarray array('abc', dtype='<U3') (one sentence: put it in a list)"),
    ({"b", "a"}, "got set {'"),  # ordered by hashes: the rows would come in no order of the caller's
    ({"a": 1, "b": 2}, "got dict {'a': 1, 'b': 2}: results come in the list's order, and a mapping has none"),
]
BAD_ITEMS = [
    (["fine", 3], "sentences[1] must be a str, got int 3"),
    (["fine", None], "sentences[1] must be a str"),
    (["fine", "x\udcff"], "sentences[1] is not text: a lone surrogate '\\udcff' at character 1"),
]


@pytest.mark.parametrize("value, message", NOT_LISTS + BAD_ITEMS)
def test_sentence_list_names_the_argument_and_what_it_got(value, message):
    with pytest.raises(BertWhiteningError, match=re.escape(message)):
        sentence_list(value)


def test_good_values_pass_unchanged():
    assert sentence_list(("a", "b")) == ["a", "b"] and sentence_list(iter(["a"])) == ["a"]
    assert path_list([pathlib.Path("x/y"), "z"]) == ["x/y", "z"]
    assert positive_int(np.int64(3), "n") == 3
    for bad in (0, -1, True, "128", 2.0, None):
        with pytest.raises(BertWhiteningError, match="n must be a positive integer"):
            positive_int(bad, "n")
    with pytest.raises(
        BertWhiteningError, match=r"files must be a list of file paths, got str 'corpus.txt' \(one file: put"
    ):
        path_list("corpus.txt")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: text(3, "name"), "name must be a str, got int 3"),
        (lambda: path(None, "output"), "output must be a path (str or pathlib.Path), got NoneType None"),
        (lambda: path("", "output"), "output must be a path (str or pathlib.Path), got str ''"),
        (lambda: optional_path(["a"], "output"), "output must be a path (str or pathlib.Path), got list ['a']"),
        (lambda: optional_integer("64", "seed"), "seed must be an integer, got str '64'"),
        (lambda: boolean("no", "lowercase"), "lowercase must be True or False, got str 'no'"),
        (lambda: positive_int(0, "n"), "n must be a positive integer, got 0"),
        (
            lambda: serving_version(MAX_VERSION + 1),
            "version must be an integer 0..2**63-1 (TF Serving's int64 versions), got 9223372036854775808",
        ),
        (
            lambda: shard_count(MAX_SHARDS + 1),
            "num_shards must be an integer 0..10000 (0: the runner chooses), got 10001",
        ),
        (lambda: shard_count(True), "num_shards must be an integer 0..10000 (0: the runner chooses), got True"),
        (lambda: shard_count(-1, "shards"), "shards must be an integer 0..10000 (0: the runner chooses), got -1"),
        (lambda: shard_count("8"), "num_shards must be an integer 0..10000 (0: the runner chooses), got '8'"),
        (lambda: sentence_stream(None), "sentences must be a list of sentences (str), got NoneType None"),
        (
            lambda: sentence_stream("abc"),
            "sentences must be a list of sentences (str), got str 'abc' (one sentence: put it in a list)",
        ),
        (lambda: sentence_stream(["a", 3], "texts"), "texts[1] must be a str, got int 3"),
        (
            lambda: sentence_list({"a"}),
            "sentences must be a list of sentences (str), got set {'a'}: results come in the list's order, "
            "and a set has none",
        ),
        (
            lambda: str_list("cls", "poolings", "pooling names (str)", one="pooling"),
            "poolings must be a list of pooling names (str), got str 'cls' (one pooling: put it in a list)",
        ),
        (lambda: path_list(["a", 3], "inputs"), "inputs[1] must be a str, got int 3"),
        (
            lambda: sentence_list(["fine", "x\udcff"]),
            "sentences[1] is not text: a lone surrogate '\\udcff' at character 1",
        ),
        (lambda: id_lists(["abc"], "ids", 30, "ids run 0..29"), "ids[0] must be a list of ids, got str 'abc'"),
        (lambda: id_lists([[1, 1.5]], "ids", 30, "ids run 0..29"), "ids[0][1] must be an int, got float 1.5"),
        (lambda: id_lists([[1, 30]], "ids", 30, "ids run 0..29"), "ids[0][1] is 30: ids run 0..29"),
        (lambda: id_lists([[-1]], "ids", 30, "ids run 0..29"), "ids[0][0] is -1: ids run 0..29"),
    ],
)
def test_each_check_refuses_in_one_exact_line(call, message):
    with pytest.raises(BertWhiteningError) as raised:
        call()
    assert str(raised.value) == message


def test_what_passes_a_check_is_given_back_as_the_plain_type():
    assert positive_int(1, "n") == 1 and type(positive_int(np.int64(1), "n")) is int
    assert serving_version(MAX_VERSION) == MAX_VERSION and serving_version(0) == 0
    assert shard_count(0) == 0 and shard_count(np.int32(MAX_SHARDS)) == MAX_SHARDS
    assert boolean(True, "b") is True and boolean(np.False_, "b") is False and boolean(np.True_, "b") is True
    assert optional_integer(None, "seed") is None and optional_integer(np.int64(-3), "seed") == -3
    assert optional_path(None, "output") is None and optional_path(pathlib.Path("a/b"), "output") == "a/b"
    assert path(pathlib.Path("a/b"), "output") == "a/b" and text("", "name") == ""
    assert list(sentence_stream(("a", "b"))) == ["a", "b"] and list(sentence_stream(iter(["c"]))) == ["c"]
    # a row of numpy's or of array's is read as Python ints; an empty row is no id
    assert id_lists([np.array([0, 29]), array.array("i", [5, 5]), []], "ids", 30, "") == [[0, 29], [5, 5], []]


def test_a_refused_value_is_shown_cut_to_forty_characters():
    assert shown("x" * 38) == "'%s'" % ("x" * 38)  # 40 characters with its quotes: whole
    assert shown("x" * 39) == "'%s..." % ("x" * 36)
    assert len(shown(list(range(100)))) == 40


class Unbuildable(SentenceEncoder):
    """A SentenceEncoder whose model must not be built: a refusal must come first."""

    @property
    def keras_encoder(self):
        raise AssertionError("the model was built before the arguments were checked")

    def _pooled_encoder(self):
        raise AssertionError("the model was built before the arguments were checked")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.encode("今天天气很好"), "sentences must be a list of sentences"),
        (lambda e: e.encode(["a", 1]), r"sentences\[1\] must be a str"),
        (lambda e: e.encode(["a"], batch_size="128"), "batch_size must be a positive integer, got '128'"),
        (lambda e: e.fit(sentences="今天天气很好"), "sentences must be a list of sentences"),
        (lambda e: e.fit(files="corpus.txt"), "files must be a list of file paths, got str"),
        (lambda e: e.fit(files=["a", "a"], batch_size=0), "batch_size must be a positive integer"),
        (lambda e: e.fit_flow(sentences=None, files=None), "files must be a list of file paths, got NoneType"),
        (lambda e: e.fit(["a", None]), r"^sentences\[1\] must be a str, got NoneType None$"),  # a list: at once
        (lambda e: e.fit_flow(("a", 3)), r"^sentences\[1\] must be a str, got int 3$"),
    ],
)
def test_sentence_encoder_refuses_before_building_the_model(tiny_model, call, message):
    encoder = Unbuildable.load(tiny_model[0])
    with pytest.raises(BertWhiteningError, match=message):
        call(encoder)


def test_the_module_functions_refuse_a_string(encoders):
    encoder = encoders["cls"]
    for call in (
        lambda: encode(encoder, "今天天气很好"),
        lambda: encode_together([encoder], "今天天气很好"),
        lambda: next(encode_stream(encoder, "今天天气很好")),
    ):
        with pytest.raises(BertWhiteningError, match="must be a list of sentences"):
            call()
    assert encode(encoder, SENTENCES[:2]).shape == (2, encoder.dim)


def test_a_stream_of_sentences_is_checked_as_read_and_a_list_at_once():
    stream = sentence_stream(iter(["a", 3]))
    assert next(stream) == "a"  # a stream may be too long to hold: its items are checked as read
    with pytest.raises(BertWhiteningError, match=r"^sentences\[1\] must be a str, got int 3$"):
        next(stream)
    with pytest.raises(BertWhiteningError, match=r"^sentences\[1\] must be a str, got int 3$"):
        sentence_stream(["a", 3])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda built: encode_together(built, ["a"]), "^encoders must be a list of encoders, got a dict: pass list"),
        (lambda built: encode_together([built["cls"], "x"], ["a"]), r"^encoders\[1\] must be an Encoder \(of bert_"),
        (lambda built: encode_together(built["cls"], ["a"]), r"^encoders must be a list of encoders, got Encoder"),
        (lambda built: encode(built, ["a"]), r"^encoder must be an Encoder .*, got dict \{.*: pass one of its values$"),
        (lambda built: next(encode_stream(None, ["a"])), r"^encoder must be an Encoder .*, got NoneType None$"),
        (lambda built: encode_ids("cls", [[1, 2]]), r"^encoder must be an Encoder .*, got str 'cls'$"),
    ],
)
def test_the_module_functions_name_what_they_got_for_an_encoder(encoders, call, message):
    """``build_encoders`` returns a dict: handing it over whole was a bare KeyError or
    AttributeError."""
    with pytest.raises(BertWhiteningError, match=message):
        call(encoders)


def test_a_set_of_sentences_is_still_a_stream_to_fit():
    """Only a list whose order names the results must be ordered; fitting has no results per row."""
    assert sorted(sentence_stream({"b", "a"})) == ["a", "b"]


def test_a_bool_is_not_a_number_and_numpy_numbers_are():
    """The one check every module calls: True would be taken as 1 (a batch size, a version, a
    reply's vector entry), and numpy's numbers come from arrays."""
    for value in (0, -3, np.int64(7), np.uint8(2)):
        assert is_number(value) and is_number(value, whole=True)
    for value in (2.5, np.float32(0.5), float("nan"), float("inf")):
        assert is_number(value) and not is_number(value, whole=True)
    for value in (True, False, np.True_, "1", None, [1], 1j):
        assert not is_number(value) and not is_number(value, whole=True)
    assert is_finite_number(0.5) and is_finite_number(np.int64(3))
    for value in (float("nan"), float("inf"), -np.inf, True, "0.5"):
        assert not is_finite_number(value)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: number(True, "seed", FlowError, whole=True), "seed must be a whole number, got bool True"),
        (lambda: number(2.5, "seed", FlowError, whole=True), "seed must be a whole number, got float 2.5"),
        (lambda: number("0.1", "epochs", FlowError), "epochs must be a number, got str '0.1'"),
        (lambda: number(False, "epochs", FlowError), "epochs must be a number, got bool False"),
        (lambda: finite_number(float("nan"), "beta", FlowError), "beta must be a finite number, got nan"),
        (lambda: finite_number(True, "beta", FlowError), "beta must be a finite number, got True"),
        (lambda: finite_number(None, "gamma", FlowError), "gamma must be a finite number, got None"),
        (lambda: integer(True, "n_components", FlowError), "n_components must be an integer, got bool True"),
        (lambda: positive_int(0, "batch_size", FlowError), "batch_size must be a positive integer, got 0"),
    ],
)
def test_the_number_checks_raise_the_callers_error_in_one_exact_line(call, message):
    with pytest.raises(FlowError) as raised:
        call()
    assert str(raised.value) == message


def test_the_number_checks_give_back_what_passed():
    assert number(np.int64(3), "n", whole=True) == 3 and number(0.5, "x") == 0.5
    assert finite_number(np.int64(3), "x") == 3.0 and type(finite_number(np.float32(0.5), "x")) is float
    assert type(integer(np.int32(-2), "n")) is int

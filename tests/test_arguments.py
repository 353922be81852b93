"""Types at the front door (`bert_whitening.arguments`): the public entry points refuse a str,
bytes or None where a list of sentences or files is expected, non-string items and ill-typed
counts, naming the argument, before any model is built."""

import pathlib
import re

import numpy as np
import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.arguments import path_list, positive_int, sentence_list, sentence_stream
from bert_whitening.encoding import encode, encode_ids, encode_stream, encode_together
from bert_whitening.errors import BertWhiteningError

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

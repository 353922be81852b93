"""The REST client's bodies and reply parsing against TF Serving's predict API as documented
(tensorflow.org/tfx/serving/api_rest), written out by hand; numpy only, so these are fast.
tests/test_serving.py feeds the same bodies to an exported model; tests/io/test_http_client.py
sends them to loopback servers."""

import json
import urllib.parse

import numpy as np
import pytest

from bert_whitening.errors import BertWhiteningError
from bert_whitening.serving import (
    RestClient,
    ids_request,
    pad_ids,
    parse_response,
    parse_search_response,
    rest_url,
    text_request,
)
from bert_whitening.tokenization.token_ids import token_ids

from helpers import TINY_VOCAB


def test_rest_url_names_model_version_and_port():
    assert rest_url("serving.local", "encoder") == "http://serving.local:8501/v1/models/encoder:predict"
    assert rest_url("h", "m", version=0) == "http://h:8501/v1/models/m/versions/0:predict"
    assert rest_url("h", "m", 12, port=9000) == "http://h:9000/v1/models/m/versions/12:predict"


def test_rest_url_quotes_the_model_name_and_refuses_what_is_not_a_version():
    """TF Serving percent-decodes the name it matches (``[^/:]+``); as it was, ``enc/../../x?y#``
    addressed another path, and a version "1" was a TypeError."""
    url = rest_url("h", "enc/../../x?y#", 3)
    assert url == "http://h:8501/v1/models/enc%2F..%2F..%2Fx%3Fy%23/versions/3:predict"
    parts = urllib.parse.urlsplit(url)
    assert not parts.query and not parts.fragment
    assert urllib.parse.unquote(parts.path.split("/")[3]) == "enc/../../x?y#"
    assert rest_url("h", "编码 器:1%") == "http://h:8501/v1/models/%E7%BC%96%E7%A0%81%20%E5%99%A8%3A1%25:predict"
    assert rest_url("h", "m", np.int64(2)) == "http://h:8501/v1/models/m/versions/2:predict"
    for version in ("1", 1.0, True, -1, 2**63, "../2"):
        with pytest.raises(
            BertWhiteningError, match=r"^version must be an integer 0..2\*\*63-1 \(TF Serving's int64 versions\), got "
        ):
            rest_url("h", "m", version)
    for model, message in [
        ("", "model must be a model name, got ''"),
        (None, "model must be a str, got NoneType None"),
    ]:
        with pytest.raises(BertWhiteningError, match=message):
            rest_url("h", model)
    with pytest.raises(BertWhiteningError, match="port must be a positive integer, got '8501'"):
        rest_url("h", "m", port="8501")


def test_text_bodies_in_both_formats():
    assert text_request(["今天", "天气".encode()]) == {"signature_name": "serve_text", "instances": ["今天", "天气"]}
    assert text_request(("a", "b"), "columnar") == {"signature_name": "serve_text", "inputs": {"text": ["a", "b"]}}
    with pytest.raises(ValueError, match="unknown request format 'rows'; choose one of: row, columnar"):
        text_request(["a"], "rows")


def test_ragged_ids_are_padded_with_zeros_and_segments_default_to_zeros():
    assert ids_request([[2, 7, 3], [2, 3]]) == {
        "signature_name": "serving_default",
        "instances": [
            {"input_ids": [2, 7, 3], "segment_ids": [0, 0, 0]},
            {"input_ids": [2, 3, 0], "segment_ids": [0, 0, 0]},
        ],
    }
    assert ids_request([[2, 3], (2, 9, 9, 3)], [[0, 0], np.zeros(4, np.int8)], "columnar") == {
        "signature_name": "serving_default",
        "inputs": {"input_ids": [[2, 3, 0, 0], [2, 9, 9, 3]], "segment_ids": [[0, 0, 0, 0], [0, 0, 0, 0]]},
    }
    json.dumps(ids_request(np.array([[2, 3]], dtype=np.int64)))  # plain ints, JSON-serialisable
    assert ids_request([[np.int64(2), 2**31 - 1]])["instances"][0]["input_ids"] == [2, 2**31 - 1]
    with pytest.raises(ValueError) as info:
        ids_request([[2, 3]], [[0, 0, 0]])
    assert str(info.value) == "segment_ids have shape (1, 3), input_ids (1, 2)"
    with pytest.raises(ValueError, match="unknown request format"):
        ids_request([[2, 3]], format="column")


@pytest.mark.parametrize(
    "input_ids, segment_ids, message",
    [
        ([[2, 1.7]], None, r"input_ids\[0\]\[1\] must be an int, got float 1.7"),
        ([[2, "7"]], None, r"input_ids\[0\]\[1\] must be an int, got str '7'"),
        ([[True, 3]], None, r"input_ids\[0\]\[0\] must be an int, got bool True"),
        ([[2, float("nan")]], None, r"input_ids\[0\]\[1\] must be an int, got float nan"),
        ([[2, float("inf")]], None, r"input_ids\[0\]\[1\] must be an int, got float inf"),
        ([[2, 3], [2, 2**31]], None, r"input_ids\[1\]\[1\] is 2147483648: token ids are from 0 to 2147483647"),
        ([[2, -1]], None, r"input_ids\[0\]\[1\] is -1: token ids are from 0 to 2147483647 \(int32\)"),
        ([[2, 10**30]], None, r"input_ids\[0\]\[1\] is 1000000000000000000000000000000: token ids"),
        (np.array([[2.0, 3.0]]), None, r"input_ids\[0\]\[0\] must be an int, got float 2.0"),
        (np.array([[True, True]]), None, r"input_ids\[0\]\[0\] must be an int, got bool True"),
        ("101", None, "input_ids must be a list of id lists, got str '101'"),
        (["101"], None, r"input_ids\[0\] must be a list of ids, got str '101'"),
        ([101, 102], None, r"input_ids\[0\] must be a list of ids, got int 101"),
        (np.array([101, 102]), None, r"input_ids\[0\] must be a list of ids, got int64 .*101"),
        ([{2: 3}], None, r"input_ids\[0\] must be a list of ids, got dict"),
        (None, None, "input_ids must be a list of id lists, got NoneType None"),
        ([[2, 3]], [[0, 1]], r"segment_ids\[0\]\[1\] is 1: the exported model takes segment id 0 alone"),
        ([[2, 3]], [[0, 0.0]], r"segment_ids\[0\]\[1\] must be an int, got float 0.0"),
        ([[2, 3]], "00", "segment_ids must be a list of id lists, got str '00'"),
    ],
)
def test_id_requests_refuse_what_is_not_rows_of_int_ids(input_ids, segment_ids, message):
    """As text_request refuses what is not a list of sentences: ids were converted with int, so
    1.7 was 1, "7" 7 and True 1, a str of digits one row per character, and NaN, inf or an id
    beyond int32 a raw ValueError or OverflowError."""
    for format in ("row", "columnar"):
        with pytest.raises(BertWhiteningError, match=message):
            ids_request(input_ids, segment_ids, format)


def test_an_id_request_that_would_pad_to_more_than_its_bound_is_refused_before_padding(monkeypatch):
    """100,000 rows of 2 ids and one of 100,000 were padded to a 37 GiB matrix (MemoryError)."""
    from bert_whitening import serving

    monkeypatch.setattr(serving, "MAX_REQUEST_IDS", 12)
    padded = ids_request([[5, 6], [5, 6], [5, 6, 7, 8]], None, "columnar")  # 3 x 4: at the bound
    assert padded["inputs"]["input_ids"][0] == [5, 6, 0, 0]
    with pytest.raises(BertWhiteningError, match="^input_ids: 4 rows padded to the longest, 4 ids, make 16 ids, more"):
        ids_request([[5, 6]] * 3 + [[5, 6, 7, 8]], None)
    with pytest.raises(BertWhiteningError, match="^segment_ids: 3 rows padded to the longest, 5 ids, make 15 ids"):
        ids_request([[5, 6]] * 3, [[0, 0], [0, 0], [0] * 5])


def test_token_ids_are_cut_as_bert4keras_cuts_them():
    """The first ``maxlen - 2`` tokens between [CLS] and [SEP], and whether any were cut."""
    from bert_whitening.backend import Tokenizer

    tokenizer = Tokenizer({token: index for index, token in enumerate(TINY_VOCAB)}, do_lower_case=True)
    for sentence in ["", "好", "今天天气很好", "我们在北京" * 20]:
        whole = tokenizer.encode(sentence)[0]
        for maxlen in (2, 3, 5, 8, len(whole) - 1, len(whole), 64):
            if maxlen < 2:
                continue
            ids, cut = token_ids(tokenizer, sentence, maxlen)
            assert ids == tokenizer.encode(sentence, maxlen=maxlen)[0]
            assert len(ids) == min(maxlen, len(whole)) and ids[0] == 2 and ids[-1] == 3
            assert cut == (len(whole) > maxlen)
    assert token_ids(tokenizer, "今天", 3) == ([2, tokenizer.token_to_id("今"), 3], True)


def test_pad_ids():
    padded = pad_ids([[5], [1, 2, 3], []])
    assert padded.dtype == np.int32 and padded.tolist() == [[5, 0, 0], [1, 2, 3], [0, 0, 0]]
    assert pad_ids([]).shape == (0, 0)


@pytest.mark.parametrize(
    "reply",
    [
        {"predictions": [[0.5, -1.0], [0.25, 2.0]]},
        {"predictions": [{"embedding": [0.5, -1.0]}, {"embedding": [0.25, 2.0]}]},
        {"outputs": [[0.5, -1.0], [0.25, 2.0]]},
        {"outputs": {"embedding": [[0.5, -1.0], [0.25, 2.0]]}},
    ],
)
def test_replies_of_every_shape_parse_to_float32_vectors(reply):
    for body in (reply, json.dumps(reply), json.dumps(reply).encode()):
        vectors = parse_response(body)
        assert vectors.dtype == np.float32
        np.testing.assert_array_equal(vectors, [[0.5, -1.0], [0.25, 2.0]])


def test_one_dimensional_predictions_are_one_column():
    np.testing.assert_array_equal(parse_response({"predictions": [0.5, 0.25]}), [[0.5], [0.25]])
    assert parse_response({"predictions": []}).shape == (0, 0)  # an empty batch is no error


def test_errors_and_foreign_replies_are_raised():
    with pytest.raises(RuntimeError) as info:
        parse_response('{"error": "Servable not found for request"}')
    assert str(info.value) == "TF Serving answered with an error: Servable not found for request"
    with pytest.raises(ValueError) as info:
        parse_response({"result": [[1.0]]})
    assert str(info.value) == "not a TF Serving predict reply: no predictions, outputs or error"


def test_text_requests_refuse_what_is_not_a_list_of_sentences():
    for sentences, message in [
        ("今天天气很好", "sentences must be a list of sentences"),
        (["今天", 7], r"sentences\[1\] must be a str, got int 7"),
        ([b"\xff\xfe"], r"sentences\[0\] is not UTF-8"),
        (None, "sentences must be a list of sentences"),
    ]:
        with pytest.raises(BertWhiteningError, match=message):
            text_request(sentences)


@pytest.mark.parametrize(
    "reply, message",
    [
        ({"predictions": [[0.6, 0.8]]}, "the reply's embedding: 1 rows for 2 sentences"),
        ({"predictions": [[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]]}, "the reply's embedding: 3 rows for 2 sentences"),
        ({"predictions": [[0.6, 0.8, 0.0], [1.0, 0.0, 0.0]]}, "embedding: 3 columns, not 2"),
        ({"predictions": [[0.6, 0.8], [float("nan"), 0.0]]}, r"embedding: row 1 is not finite in float32 \(nan\)"),
        ({"outputs": [[0.6, 0.8], [1e300, 0.0]]}, r"embedding: row 1 is not finite in float32 \(1e\+300\)"),
        ({"outputs": [[0.6, 0.8], [1.0]]}, "embedding: rows of different lengths"),
        ({"outputs": [0.6, 0.8]}, "embedding: row 0 is a number 0.6, not a list of numbers"),
        ([1, 2], "not a TF Serving predict reply: a list, not an object"),
    ],
)
def test_a_reply_must_have_one_finite_row_per_sentence_of_the_width(reply, message):
    with pytest.raises(BertWhiteningError, match=message):
        parse_response(reply, rows=2, dim=2)


SEARCH_REPLIES = [
    {"predictions": [{"ids": [3, 0], "scores": [0.9, 0.5]}, {"ids": [1, 2], "scores": [0.8, 0.7]}]},
    {"outputs": {"ids": [[3, 0], [1, 2]], "scores": [[0.9, 0.5], [0.8, 0.7]]}},
]


@pytest.mark.parametrize(
    "reply, message",
    [
        (
            SEARCH_REPLIES[0],
            r"no embedding output \(it has ids, scores: a reply of serve_search, read by parse_search_response\)",
        ),
        (SEARCH_REPLIES[1], r"no embedding output \(it has ids, scores: a reply of serve_search"),
        ({"outputs": {"vectors": [[0.6, 0.8]]}}, r"no embedding output \(it has vectors\)$"),
        ({"predictions": [["0.5", 0.5]]}, "embedding: row 0 holds a string '0.5', not a number"),
        ({"outputs": [[0.5, True]]}, "embedding: row 0 holds a boolean True, not a number"),
        ('{"outputs": [[0.5, 1%s]]}' % ("0" * 400), "embedding: a number beyond float64"),
        ('{"outputs": [[0.5, %s]]}' % ("9" * 5000), r"the reply is not valid JSON \(Exceeds the limit"),
        (
            '{"outputs": %s0.5%s}' % ("[" * 100_000, "]" * 100_000),
            r"the reply is not valid JSON \(nested too deeply",
        ),
        ({"outputs": [[[[0.5]]]]}, "embedding: row 0 holds a list, not a number"),
        ({"predictions": None}, "the reply's predictions are null, not a list"),
        ({"outputs": None}, "the reply's embedding: null, not a list"),
        ({"outputs": {"embedding": "0.5"}}, "the reply's embedding: a string '0.5', not a list"),
        ("{'predictions': []}", r"the reply is not valid JSON \(Expecting property name"),
    ],
)
def test_what_is_not_a_reply_of_vectors_is_refused_in_one_line(reply, message):
    """A serve_search reply was a KeyError, strings and booleans were read as numbers, a huge
    integer was an OverflowError, deep nesting a RecursionError and null predictions a TypeError."""
    with pytest.raises(BertWhiteningError, match=message) as info:
        parse_response(reply)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("reply", SEARCH_REPLIES + [json.dumps(SEARCH_REPLIES[0])])
def test_search_replies_parse_to_ids_and_scores(reply):
    ids, scores = parse_search_response(reply, rows=2, top_k=2)
    assert ids.dtype == np.int64 and ids.tolist() == [[3, 0], [1, 2]]
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(scores, np.float32([[0.9, 0.5], [0.8, 0.7]]))
    assert [a.shape for a in parse_search_response({"predictions": []}, top_k=2)] == [(0, 2), (0, 2)]


@pytest.mark.parametrize(
    "reply, message",
    [
        (
            {"predictions": [[0.6, 0.8]]},
            r"prediction 0 is a list, not an object of ids, scores \(a reply of one output, as of serve_text or",
        ),
        ({"outputs": [[3, 0]]}, r"the reply's outputs is a list, not an object of ids, scores"),
        (
            {"outputs": {"embedding": [[0.6, 0.8]]}},
            r"no ids output \(it has embedding: a reply of serve_text or serving_default",
        ),
        ({"outputs": {"ids": [[3, 0]], "scores": [[0.9, 0.5]]}}, "the reply's scores: 1 rows for 2 sentences"),
        ({"outputs": {"ids": [[3, 0], [1, 2]], "scores": [[0.9], [0.8]]}}, "the reply's scores: 1 columns, not 2"),
        (
            {"outputs": {"ids": [[3], [1]], "scores": [[0.9, 0.5], [0.8, 0.7]]}},
            r"ids: shape \(2, 1\), its scores' \(2, 2\)",
        ),
        (
            {"outputs": {"ids": [[3, 0.5], [1, 2]], "scores": [[0.9, 0.5], [0.8, 0.7]]}},
            "ids: row 0 holds a number 0.5, not an integer",
        ),
        (
            {"outputs": {"ids": [[3, 0], [1, -2]], "scores": [[0.9, 0.5], [0.8, 0.7]]}},
            "ids: row 1 holds -2, not a row number",
        ),
        ({"outputs": {"ids": [[3, 0], [1, 2**70]], "scores": [[0.9, 0.5], [0.8, 0.7]]}}, "ids: a number beyond int64"),
        (
            {"outputs": {"ids": [[3, 0], [1, 2]], "scores": [[0.9, 0.5], [0.8, float("inf")]]}},
            r"scores: row 1 is not finite",
        ),
    ],
)
def test_search_replies_are_checked(reply, message):
    with pytest.raises(BertWhiteningError, match=message):
        parse_search_response(reply, rows=2, top_k=2)


def test_bodies_with_dimensions_ask_the_dimensions_signatures_in_columnar_format():
    """``dimensions`` is one scalar for the request, which row format (an entry per sentence,
    each holding every input) cannot carry: columnar is the default with it, and row refused."""
    assert text_request(["今天", "a"], dimensions=8) == {
        "signature_name": "serve_text_dimensions",
        "inputs": {"text": ["今天", "a"], "dimensions": 8},
    }
    assert text_request(["a"], "columnar", np.int64(3)) == {
        "signature_name": "serve_text_dimensions",
        "inputs": {"text": ["a"], "dimensions": 3},
    }
    body = ids_request([[2, 7, 3], [2, 3]], dimensions=np.int32(1))
    assert body == {
        "signature_name": "serve_dimensions",
        "inputs": {"input_ids": [[2, 7, 3], [2, 3, 0]], "segment_ids": [[0, 0, 0], [0, 0, 0]], "dimensions": 1},
    }
    assert json.loads(json.dumps(body)) == body  # plain ints
    assert text_request(["a"], None)["instances"] == ["a"]  # without dimensions: row, as before
    for request in (lambda: text_request(["a"], "row", 8), lambda: ids_request([[2, 3]], None, "row", 8)):
        with pytest.raises(BertWhiteningError, match="^dimensions is one number for the whole request, which TF"):
            request()


@pytest.mark.parametrize(
    "dimensions, message",
    [
        (0, "dimensions must be a positive integer, got 0"),
        (-1, "dimensions must be a positive integer, got -1"),
        (True, "dimensions must be a positive integer, got True"),
        (2.0, "dimensions must be a positive integer, got 2.0"),
        ("8", "dimensions must be a positive integer, got '8'"),
        (2**31, r"dimensions must be below 2\*\*31 \(the model's int32\), got 2147483648"),
    ],
)
def test_a_dimensions_that_is_not_a_positive_int32_is_refused_in_one_line(dimensions, message):
    for request in (
        lambda: text_request(["a"], dimensions=dimensions),
        lambda: ids_request([[2]], None, None, dimensions),
    ):
        with pytest.raises(BertWhiteningError, match="^%s$" % message):
            request()


class Posted(RestClient):
    """A `RestClient` whose exchange is a recorded body and a given reply (HTTP 200)."""

    def __init__(self, reply):
        super().__init__()
        self.reply, self.bodies = reply, []

    def post(self, url, body, timeout, max_bytes):
        self.bodies.append(json.loads(body))
        return 200, json.dumps(self.reply).encode()


def test_the_rest_client_sends_dimensions_and_checks_the_reply_s_width():
    with Posted({"outputs": [[0.6, 0.8], [1.0, 0.0]]}) as client:
        vectors = client.embed("http://h:8501/v1/models/m:predict", ["a", "b"], dimensions=2)
        assert vectors.dtype == np.float32 and vectors.tolist() == [[np.float32(0.6), np.float32(0.8)], [1.0, 0.0]]
        client.embed("http://h:8501/v1/models/m:predict", input_ids=[[2, 3], [2]], dimensions=2)
        assert client.bodies == [
            text_request(["a", "b"], dimensions=2),
            ids_request([[2, 3], [2]], dimensions=2),
        ]
        with pytest.raises(BertWhiteningError, match="the reply's embedding: 2 columns, not 3"):
            client.embed("http://h:8501/v1/models/m:predict", ["a", "b"], dimensions=3)
        with pytest.raises(BertWhiteningError, match="the reply's embedding: 2 rows for 1 sentences"):
            client.embed("http://h:8501/v1/models/m:predict", input_ids=[[2, 3]])
        assert client.bodies[-1] == ids_request([[2, 3]])  # no dimensions: serving_default, row format
        with pytest.raises(BertWhiteningError, match="give either sentences or input_ids"):
            client.embed("http://h:8501/v1/models/m:predict", ["a"], input_ids=[[2]])

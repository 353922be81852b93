"""The REST client's bodies and reply parsing against TF Serving's predict API as documented
(tensorflow.org/tfx/serving/api_rest), written out by hand; numpy only, so these are fast.
tests/test_serving.py feeds the same bodies to an exported model."""

import json

import numpy as np
import pytest

from bert_whitening.serving import ids_request, pad_ids, parse_response, rest_url, text_request


def test_rest_url_names_model_version_and_port():
    assert rest_url("serving.local", "encoder") == "http://serving.local:8501/v1/models/encoder:predict"
    assert rest_url("h", "m", version=0) == "http://h:8501/v1/models/m/versions/0:predict"
    assert rest_url("h", "m", 12, port=9000) == "http://h:9000/v1/models/m/versions/12:predict"


def test_text_bodies_in_both_formats():
    assert text_request(["今天", "天气", 7]) == {"signature_name": "serve_text", "instances": ["今天", "天气", "7"]}
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
    assert ids_request([[2, 3], [2, 9, 9, 3]], [[0, 1], [1, 1, 1, 1]], "columnar") == {
        "signature_name": "serving_default",
        "inputs": {"input_ids": [[2, 3, 0, 0], [2, 9, 9, 3]], "segment_ids": [[0, 1, 0, 0], [1, 1, 1, 1]]},
    }
    json.dumps(ids_request(np.array([[2, 3]], dtype=np.int64)))  # plain ints, JSON-serialisable
    with pytest.raises(ValueError) as info:
        ids_request([[2, 3]], [[0, 0, 0]])
    assert str(info.value) == "segment_ids have shape (1, 3), input_ids (1, 2)"
    with pytest.raises(ValueError, match="unknown request format"):
        ids_request([[2, 3]], format="column")


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

"""The serving client up to the wire format: bodies decoded as TF Serving decodes them and fed to
the exported signatures must give `encode`'s vectors; replies must parse back to them."""

import json

import numpy as np
import pytest

from bert_whitening.backend import tf
from bert_whitening.encoding import encode, tokenize
from bert_whitening.errors import BertWhiteningError
from bert_whitening.serving import (
    RestClient,
    grpc_request,
    grpc_vectors,
    ids_request,
    parse_response,
    rest_url,
    text_request,
)

from helpers import SENTENCES
from tfserving_json import decode

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("exported")]  # one export (tests/export/test_saved_model.py)

SIGNATURE_INPUTS = {"serve_text": {"text": object}, "serving_default": {"input_ids": np.int32, "segment_ids": np.int32}}
SIGNATURE_INPUTS.update(
    serve_text_dimensions={**SIGNATURE_INPUTS["serve_text"], "dimensions": np.int32},
    serve_dimensions={**SIGNATURE_INPUTS["serving_default"], "dimensions": np.int32},
)


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[1])


def serve(loaded, body):
    signature = body["signature_name"]
    tensors = decode(body, SIGNATURE_INPUTS[signature])
    return loaded.signatures[signature](**{k: tf.constant(v) for k, v in tensors.items()})["embedding"].numpy()


@pytest.mark.parametrize("format", ["row", "columnar"])
def test_text_bodies_give_the_vectors_of_encode(loaded, whitened, format):
    body = text_request(SENTENCES, format)
    np.testing.assert_allclose(serve(loaded, body), encode(whitened, SENTENCES), atol=1e-5)


@pytest.mark.parametrize("format", ["row", "columnar"])
def test_id_bodies_give_the_vectors_of_encode(loaded, whitened, format):
    sequences, _ = tokenize(whitened, SENTENCES)
    body = ids_request(sequences, format=format)  # ragged lists, padded by the client
    np.testing.assert_allclose(serve(loaded, body), encode(whitened, SENTENCES), atol=1e-5)


@pytest.mark.parametrize("d", [1, 5, 16])
def test_bodies_with_dimensions_give_the_whitening_kept_at_d(loaded, whitened, encoders, d):
    """The served vectors at ``d``, from bodies decoded as TF Serving decodes them: the whitening
    kept at ``d`` of the pooled vectors (`Whitening.transform`)."""
    expected = whitened.whitening.transform(encode(encoders["first-last-avg"], SENTENCES), n_components=d)
    sequences, _ = tokenize(whitened, SENTENCES)
    for body in (text_request(SENTENCES, dimensions=d), ids_request(sequences, dimensions=d)):
        np.testing.assert_allclose(serve(loaded, body), expected, atol=1e-5)


class Served(RestClient):
    """A `RestClient` whose server is TF Serving's decoding of the body, the loaded signature it
    names, and a columnar reply."""

    def __init__(self, loaded):
        super().__init__()
        self.loaded = loaded

    def post(self, url, body, timeout, max_bytes):
        body = json.loads(body)
        return 200, json.dumps({"outputs": serve(self.loaded, body).tolist()}).encode()


def test_the_rest_client_s_dimensions_give_the_whitening_kept_at_d(loaded, whitened, encoders):
    expected = whitened.whitening.transform(encode(encoders["first-last-avg"], SENTENCES), n_components=5)
    with Served(loaded) as client:
        url = rest_url("localhost", "encoder")
        np.testing.assert_allclose(client.embed(url, SENTENCES, dimensions=5), expected, atol=1e-5)
        sequences, _ = tokenize(whitened, SENTENCES)
        np.testing.assert_allclose(client.embed(url, input_ids=sequences, dimensions=5), expected, atol=1e-5)
        np.testing.assert_allclose(client.embed(url, SENTENCES), encode(whitened, SENTENCES), atol=1e-5)


def test_grpc_requests_with_dimensions_carry_the_right_tensors(loaded, whitened, encoders):
    expected = whitened.whitening.transform(encode(encoders["first-last-avg"], SENTENCES), n_components=3)
    sequences, _ = tokenize(whitened, SENTENCES)
    for request in (
        grpc_request("encoder", sentences=SENTENCES, dimensions=3),
        grpc_request("encoder", input_ids=sequences, dimensions=3),
    ):
        signature = request.model_spec.signature_name
        assert signature in ("serve_text_dimensions", "serve_dimensions")
        assert request.inputs["dimensions"].dtype == tf.int32.as_datatype_enum
        tensors = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        assert tensors["dimensions"].shape == ()
        out = loaded.signatures[signature](**tensors)["embedding"]
        np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)
    with pytest.raises(BertWhiteningError, match="dimensions must be a positive integer, got 0"):
        grpc_request("encoder", sentences=SENTENCES, dimensions=0)


def test_replies_parse_back_to_vectors(whitened):
    vectors = encode(whitened, SENTENCES[:4])
    replies = [
        {"predictions": vectors.tolist()},
        {"predictions": [{"embedding": v} for v in vectors.tolist()]},
        {"outputs": vectors.tolist()},
        {"outputs": {"embedding": vectors.tolist()}},
    ]
    for reply in replies:
        np.testing.assert_allclose(parse_response(json.dumps(reply)), vectors, atol=1e-6)
    with pytest.raises(RuntimeError, match="Op type not registered"):
        parse_response({"error": "Op type not registered 'RegexSplitWithOffsets'"})
    with pytest.raises(ValueError, match="not a TF Serving predict reply"):
        parse_response({"result": []})


def test_grpc_requests_carry_the_right_tensors(loaded, whitened):
    request = grpc_request("encoder", sentences=SENTENCES, version=3)
    assert request.model_spec.name == "encoder" and request.model_spec.version.value == 3
    assert request.model_spec.signature_name == "serve_text"
    text = tf.make_ndarray(request.inputs["text"])
    out = loaded.signatures["serve_text"](text=tf.constant(text))["embedding"]
    np.testing.assert_allclose(out.numpy(), encode(whitened, SENTENCES), atol=1e-5)

    sequences, _ = tokenize(whitened, SENTENCES)
    request = grpc_request("encoder", input_ids=sequences)
    assert request.model_spec.signature_name == "serving_default"
    assert request.inputs["input_ids"].dtype == tf.int32.as_datatype_enum
    tensors = {name: tf.constant(tf.make_ndarray(request.inputs[name])) for name in ("input_ids", "segment_ids")}
    out = loaded.signatures["serving_default"](**tensors)["embedding"]
    np.testing.assert_allclose(out.numpy(), encode(whitened, SENTENCES), atol=1e-5)

    from tensorflow_serving.apis import predict_pb2

    response = predict_pb2.PredictResponse()
    response.outputs["embedding"].CopyFrom(tf.make_tensor_proto(out.numpy()))
    np.testing.assert_allclose(grpc_vectors(response), out.numpy())


def predict_response(**outputs):
    from tensorflow_serving.apis import predict_pb2

    response = predict_pb2.PredictResponse()
    for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
    return response


@pytest.mark.parametrize(
    "outputs, message",
    [
        ({"embedding": np.array([[np.nan, 1.0]], np.float32)}, r"embedding: row 0 is not finite in float32 \(nan\)"),
        ({"embedding": np.array([[0.5, 1e300]])}, r"embedding: row 0 is not finite in float32 \(1e\+300\)"),
        ({"embedding": np.array([0.6, 0.8], np.float32)}, r"embedding: shape \(2,\), not \[batch, k\]"),
        ({"embedding": np.ones((3, 2), np.float32)}, "the reply's embedding: 3 rows for 1 sentences"),
        ({"embedding": np.ones((1, 3), np.float32)}, "embedding: 3 columns, not 2"),
        ({"embedding": np.ones((1, 2), np.int32)}, "the reply's embedding: int32, not floats"),
        (
            {"ids": np.ones((1, 2), np.int64), "scores": np.ones((1, 2), np.float32)},
            r"no embedding output \(it has ids, scores: a reply of serve_search",
        ),
        ({}, r"no embedding output \(it has none\)"),
    ],
)
def test_grpc_replies_are_checked_as_rest_replies_are(outputs, message):
    """One check of a reply's vectors (`reply_vectors`): gRPC's once returned NaN rows, a 1-D
    embedding and a float64 1e300 as inf, and a reply without embedding was a TypeError."""
    with pytest.raises(BertWhiteningError, match=message):
        grpc_vectors(predict_response(**outputs), rows=1, dim=2)
    if "embedding" in outputs and outputs["embedding"].dtype.kind == "f" and outputs["embedding"].ndim == 2:
        with pytest.raises(BertWhiteningError, match=message):
            parse_response({"outputs": outputs["embedding"].tolist()}, rows=1, dim=2)


def test_grpc_vectors_are_float32():
    vectors = grpc_vectors(predict_response(embedding=np.array([[0.6, 0.8]])), rows=1, dim=2)
    assert vectors.dtype == np.float32 and vectors.tolist() == [[np.float32(0.6), np.float32(0.8)]]


@pytest.mark.parametrize(
    "sentences, message",
    [
        ("hello", "sentences must be a list of sentences"),
        ([1], r"sentences\[0\] must be a str, got int 1"),
        ([b"\xff"], r"sentences\[0\] is not UTF-8"),
        (["a", "x\ud800"], r"sentences\[1\] is not text: a lone surrogate"),
    ],
)
def test_grpc_requests_refuse_what_text_requests_refuse(sentences, message):
    """One front door for both clients: gRPC once sent a str as one sentence per character, an
    int as its digits and bytes as their repr."""
    for request in (text_request, lambda given: grpc_request("m", sentences=given)):
        with pytest.raises(BertWhiteningError, match=message):
            request(sentences)


def test_grpc_requests_send_bytes_as_the_text_they_are():
    request = grpc_request("m", sentences=["今天".encode(), "ok"])
    assert list(request.inputs["text"].string_val) == ["今天".encode(), b"ok"]


def test_urls_and_argument_checks():
    assert rest_url("localhost", "encoder") == "http://localhost:8501/v1/models/encoder:predict"
    assert rest_url("h", "m", 2, 9000) == "http://h:9000/v1/models/m/versions/2:predict"
    with pytest.raises(ValueError, match="unknown request format 'rows'; choose one of: row, columnar"):
        text_request(["a"], "rows")
    with pytest.raises(ValueError, match="either sentences or input_ids"):
        grpc_request("m")
    with pytest.raises(BertWhiteningError, match=r"version must be an integer 0..2\*\*63-1"):
        grpc_request("m", sentences=["a"], version="1")  # as rest_url refuses it
    assert grpc_request("m/1", sentences=["a"], version=0).model_spec.name == "m/1"  # no URL: as it is
    with pytest.raises(ValueError, match="segment_ids have shape"):
        ids_request([[2, 3]], [[0, 0, 0]])

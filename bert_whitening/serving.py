"""A small client for an exported encoder served by TF Serving. numpy and json only.

REST bodies follow TF Serving's predict API in both formats: *row* (``instances``, one entry per
sentence) and *columnar* (``inputs``, one entry per named input). The gRPC request needs
``tensorflow-serving-api`` and imports TensorFlow when it is built, nothing before.

    body = text_request(["今天天气很好", "今天天气不错"])          # serve_text signature
    reply = requests.post(rest_url("localhost", "encoder"), json=body).json()
    vectors = parse_response(reply)                                  # float32 [2, k]
"""

import json

import numpy as np

from bert_whitening.names import check_choice
from bert_whitening.token_ids import pad_ids

REQUEST_FORMATS = ("row", "columnar")
TEXT_SIGNATURE = "serve_text"
IDS_SIGNATURE = "serving_default"


def rest_url(host, model, version=None, port=8501):
    """``http://HOST:PORT/v1/models/MODEL[/versions/N]:predict``."""
    path = "/v1/models/%s" % model + ("/versions/%d" % version if version is not None else "")
    return "http://%s:%d%s:predict" % (host, port, path)


def text_request(sentences, format="row"):
    """A REST body for the ``serve_text`` signature: UTF-8 sentences in, vectors out."""
    check_choice("request format", format, REQUEST_FORMATS)
    sentences = [str(s) for s in sentences]
    if format == "row":
        return {"signature_name": TEXT_SIGNATURE, "instances": sentences}
    return {"signature_name": TEXT_SIGNATURE, "inputs": {"text": sentences}}


def ids_request(input_ids, segment_ids=None, format="row"):
    """A REST body for ``serving_default``; ragged id lists are padded with 0 (padding does not
    change a sentence's vector), segment ids default to zeros."""
    check_choice("request format", format, REQUEST_FORMATS)
    input_ids = pad_ids(input_ids)
    segment_ids = np.zeros_like(input_ids) if segment_ids is None else pad_ids(segment_ids)
    if segment_ids.shape != input_ids.shape:
        raise ValueError("segment_ids have shape %s, input_ids %s" % (segment_ids.shape, input_ids.shape))
    if format == "row":
        instances = [
            {"input_ids": ids.tolist(), "segment_ids": segs.tolist()}
            for ids, segs in zip(input_ids, segment_ids, strict=True)
        ]
        return {"signature_name": IDS_SIGNATURE, "instances": instances}
    return {
        "signature_name": IDS_SIGNATURE,
        "inputs": {"input_ids": input_ids.tolist(), "segment_ids": segment_ids.tolist()},
    }


def parse_response(body):
    """Vectors (float32 ``[batch, k]``) from a REST reply, a dict or its JSON text.

    Row replies carry ``predictions`` (a list of vectors, or of ``{"embedding": ...}`` objects),
    columnar ones ``outputs`` (the array, or ``{"embedding": ...}``); an ``error`` is raised.
    """
    if isinstance(body, (str, bytes)):
        body = json.loads(body)
    if "error" in body:
        raise RuntimeError("TF Serving answered with an error: %s" % body["error"])
    if "predictions" in body:
        rows = body["predictions"]
        rows = [row["embedding"] if isinstance(row, dict) else row for row in rows]
        if not rows:  # an empty batch: no dimension to read
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
    if "outputs" in body:
        outputs = body["outputs"]
        outputs = outputs["embedding"] if isinstance(outputs, dict) else outputs
        return np.asarray(outputs, dtype=np.float32)
    raise ValueError("not a TF Serving predict reply: no predictions, outputs or error")


def grpc_request(model, sentences=None, input_ids=None, segment_ids=None, version=None):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for either signature.

    Give ``sentences`` for ``serve_text`` or ``input_ids`` for ``serving_default``.
    """
    from tensorflow_serving.apis import predict_pb2

    from bert_whitening.backend import tf

    if (sentences is None) == (input_ids is None):
        raise ValueError("give either sentences or input_ids")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if version is not None:
        request.model_spec.version.value = version
    if sentences is not None:
        request.model_spec.signature_name = TEXT_SIGNATURE
        request.inputs["text"].CopyFrom(tf.make_tensor_proto([str(s) for s in sentences], tf.string))
    else:
        request.model_spec.signature_name = IDS_SIGNATURE
        body = ids_request(input_ids, segment_ids, "columnar")["inputs"]
        for name in ("input_ids", "segment_ids"):
            request.inputs[name].CopyFrom(tf.make_tensor_proto(np.asarray(body[name], np.int32)))
    return request


def grpc_vectors(response):
    """Vectors from a ``PredictResponse``."""
    from bert_whitening.backend import tf

    return tf.make_ndarray(response.outputs["embedding"]).astype(np.float32)

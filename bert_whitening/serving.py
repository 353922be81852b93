"""A small client for an exported encoder served by TF Serving. numpy and json only.

REST bodies follow TF Serving's predict API in both formats: *row* (``instances``, one entry per
sentence) and *columnar* (``inputs``, one entry per named input). The gRPC request needs
``tensorflow-serving-api`` and imports TensorFlow when it is built, nothing before.

    sentences = ["今天天气很好", "今天天气不错"]
    body = text_request(sentences)                                   # serve_text signature
    reply = predict(rest_url("localhost", "encoder"), body)          # bounded in time and size
    vectors = parse_response(reply, rows=len(sentences))             # float32 [2, k], checked
"""

import http.client
import json
import socket
import time
import urllib.parse

import numpy as np

from bert_whitening.arguments import sentence_list
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import check_choice
from bert_whitening.token_ids import pad_ids

#: `predict`'s defaults: the whole exchange, and the largest reply read (a reply of 10,000
#: vectors of 768 floats as JSON text is about 100 MB).
TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 256 << 20

REQUEST_FORMATS = ("row", "columnar")
TEXT_SIGNATURE = "serve_text"
IDS_SIGNATURE = "serving_default"


def rest_url(host, model, version=None, port=8501):
    """``http://HOST:PORT/v1/models/MODEL[/versions/N]:predict``."""
    path = "/v1/models/%s" % model + ("/versions/%d" % version if version is not None else "")
    return "http://%s:%d%s:predict" % (host, port, path)


def request_sentences(sentences):
    """``sentences`` as a list of str: bytes are read as UTF-8 (what ``serve_text`` takes), and
    anything else that is not a str is refused, naming the item."""
    if isinstance(sentences, (list, tuple)):
        decoded = []
        for index, sentence in enumerate(sentences):
            if isinstance(sentence, (bytes, bytearray)):
                try:
                    sentence = bytes(sentence).decode("utf-8")
                except UnicodeDecodeError as error:
                    raise BertWhiteningError("sentences[%d] is not UTF-8: %s" % (index, error)) from None
            decoded.append(sentence)
        sentences = decoded
    return sentence_list(sentences)


def text_request(sentences, format="row"):
    """A REST body for the ``serve_text`` signature: UTF-8 sentences in, vectors out."""
    check_choice("request format", format, REQUEST_FORMATS)
    sentences = request_sentences(sentences)
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


def parse_response(body, rows=None, dim=None):
    """Vectors (float32 ``[batch, k]``) from a REST reply, a dict or its JSON text.

    Row replies carry ``predictions`` (a list of vectors, or of ``{"embedding": ...}`` objects),
    columnar ones ``outputs`` (the array, or ``{"embedding": ...}``); an ``error`` is raised.
    The vectors must be a finite ``[batch, k]`` matrix, with ``rows`` rows (the request's) and
    ``dim`` columns when given: a reply that lost or added a row would pair every later vector
    with the wrong sentence.
    """
    if isinstance(body, (str, bytes)):
        body = json.loads(body)
    if not isinstance(body, dict):
        raise ValueError("not a TF Serving predict reply: a JSON %s, not an object" % type(body).__name__)
    if "error" in body:
        raise RuntimeError("TF Serving answered with an error: %s" % body["error"])
    if "predictions" in body:
        vectors = [row["embedding"] if isinstance(row, dict) else row for row in body["predictions"]]
    elif "outputs" in body:
        outputs = body["outputs"]
        vectors = outputs["embedding"] if isinstance(outputs, dict) else outputs
    else:
        raise ValueError("not a TF Serving predict reply: no predictions, outputs or error")
    if isinstance(vectors, list) and not vectors:  # an empty batch: no dimension to read
        vectors = np.zeros((0, dim or 0), dtype=np.float32)
    try:
        vectors = np.asarray(vectors, dtype=np.float64)  # float32's range checked, not overflowed
    except (TypeError, ValueError):
        raise ValueError("the reply's vectors are not a matrix of numbers (rows of different lengths?)") from None
    if "predictions" in body and vectors.ndim == 1:  # row format of a k = 1 model: one number a row
        vectors = vectors.reshape(-1, 1)
    return reply_vectors(vectors, rows, dim)


def reply_vectors(vectors, rows=None, dim=None):
    """``vectors`` (numbers, ``[batch, k]``) as float32 if they are what a request asked for; the
    one check of a reply's vectors, REST's and gRPC's: a ``[batch, k]`` matrix with ``rows`` rows
    (the request's) and ``dim`` columns when given, since a reply that lost or added a row would
    pair every later vector with the wrong sentence, and finite in float32 (a float64 1e300 would
    become inf), since a NaN vector has no cosine with anything."""
    if vectors.ndim != 2:
        raise BertWhiteningError("the reply's vectors have shape %s, not [batch, k]" % (vectors.shape,))
    if rows is not None and len(vectors) != rows:
        raise BertWhiteningError("the reply has %d vectors for %d sentences" % (len(vectors), rows))
    if dim is not None and vectors.shape[1] != dim:
        raise BertWhiteningError("the reply's vectors have %d dimensions, not %d" % (vectors.shape[1], dim))
    with np.errstate(over="ignore"):
        single = vectors.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(single).all(axis=1))
    if bad.size:
        value = vectors[bad[0]][~np.isfinite(single[bad[0]])][0]
        raise BertWhiteningError("the reply's vector %d is not finite in float32: %s" % (bad[0], value))
    return single


def predict(url, body, timeout=TIMEOUT_SECONDS, max_bytes=MAX_REPLY_BYTES):
    """POST ``body`` (a dict) as JSON to TF Serving's REST ``url`` (``http://``) and return the
    reply's JSON object, within ``timeout`` seconds for the whole exchange (a server that answers
    a byte at a time is cut off too) and ``max_bytes`` of reply. An error reply (HTTP 4xx/5xx)
    carries TF Serving's ``{"error": ...}``, which `parse_response` raises."""
    deadline = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("%s: not an http:// URL of TF Serving's REST API" % url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        path = parts.path + ("?" + parts.query if parts.query else "")
        payload = json.dumps(body).encode("utf-8")
        connection.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
        sock = connection.sock  # the reply reads from it; http.client may drop its own reference
        reply = connection.getresponse()
        chunks, size = [], 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("%s: no whole reply within %g s" % (url, timeout))
            sock.settimeout(remaining)
            chunk = reply.read1(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise ValueError("%s: the reply is larger than %d bytes" % (url, max_bytes))
            chunks.append(chunk)
    except (socket.timeout, TimeoutError):
        raise TimeoutError("%s: no whole reply within %g s" % (url, timeout)) from None
    finally:
        connection.close()
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise ValueError("%s: the reply (HTTP %d) is not JSON" % (url, reply.status)) from None


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
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(request_sentences(sentences), tf.string))
    else:
        request.model_spec.signature_name = IDS_SIGNATURE
        body = ids_request(input_ids, segment_ids, "columnar")["inputs"]
        for name in ("input_ids", "segment_ids"):
            request.inputs[name].CopyFrom(tf.make_tensor_proto(np.asarray(body[name], np.int32)))
    return request


def grpc_vectors(response, rows=None, dim=None):
    """Vectors (float32 ``[batch, k]``) from a ``PredictResponse``, checked as `parse_response`
    checks a REST reply's (`reply_vectors`: ``rows`` rows and ``dim`` columns when given, all
    finite in float32)."""
    from bert_whitening.backend import tf

    if "embedding" not in response.outputs:  # reading a missing key of a proto map would add it
        raise BertWhiteningError(
            "the reply has no embedding output (it has %s)" % (", ".join(sorted(response.outputs)) or "none")
        )
    try:
        vectors = tf.make_ndarray(response.outputs["embedding"])
    except (TypeError, ValueError) as error:
        raise BertWhiteningError("the reply's embedding is not a readable tensor: %s" % error) from None
    if vectors.dtype.kind != "f":
        raise BertWhiteningError("the reply's embedding holds %s, not floats" % vectors.dtype)
    return reply_vectors(vectors, rows, dim)

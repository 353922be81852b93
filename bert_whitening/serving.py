"""A small client for an exported encoder served by TF Serving. numpy and json only.

REST bodies follow TF Serving's predict API in both formats: *row* (``instances``, one entry per
sentence) and *columnar* (``inputs``, one entry per named input). The gRPC request needs
``tensorflow-serving-api`` and imports TensorFlow when it is built, nothing before.

    sentences = ["今天天气很好", "今天天气不错"]
    body = text_request(sentences)                                   # serve_text signature
    reply = predict(rest_url("localhost", "encoder"), body)          # bounded in time and size
    vectors = parse_response(reply, rows=len(sentences))             # float32 [2, k], checked

With ``dimensions=d`` a body asks the export's ``serve_text_dimensions`` or ``serve_dimensions``
for the first ``d`` whitened coordinates, renormalised, in columnar format (a scalar input cannot
be a row-format instance).

`RestClient` keeps its connections from one call to the next and sends headers over HTTPS; the
exchange itself (one deadline, the reply's size bound, TLS) is `bert_whitening.io.http_client`'s.
"""

import json
import urllib.parse

import numpy as np

from bert_whitening.arguments import id_lists, is_number, positive_int, sentence_list, serving_version, shown, text
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.http_client import DEFAULT_PORTS, MAX_REPLY_BYTES, TIMEOUT_SECONDS, HttpClient
from bert_whitening.io.records import parse_json
from bert_whitening.names import check_choice
from bert_whitening.tokenization.token_ids import pad_ids

#: The most ids a ``serving_default`` request may hold once padded (rows x the longest row): the
#: padded matrix is made before anything is sent, and one long row among many short ones would
#: make it of any size.
MAX_REQUEST_IDS = 1 << 24

REQUEST_FORMATS = ("row", "columnar")
TEXT_SIGNATURE = "serve_text"
IDS_SIGNATURE = "serving_default"
SEARCH_SIGNATURE = "serve_search"
#: The signature taking ``dimensions`` beside the inputs of each signature of vectors.
DIMENSIONS_SIGNATURES = {IDS_SIGNATURE: "serve_dimensions", TEXT_SIGNATURE: "serve_text_dimensions"}

#: What ``serving_default`` takes: int32 token ids, and segment 0 alone (what ``encode`` feeds).
INT32_END = 1 << 31
TOKEN_ID_BOUNDS = "token ids are from 0 to %d (int32)" % (INT32_END - 1)
SEGMENT_ID_BOUNDS = "the exported model takes segment id 0 alone, as encode feeds"

#: The outputs of each signature's reply, sorted, and what reads them: a reply read as another's
#: is refused naming what it is.
EMBEDDING_OUTPUTS = ("embedding",)
SEARCH_OUTPUTS = ("ids", "scores")
REPLY_READERS = {
    EMBEDDING_OUTPUTS: "%s or %s, read by parse_response or grpc_vectors" % (TEXT_SIGNATURE, IDS_SIGNATURE),
    SEARCH_OUTPUTS: "%s, read by parse_search_response" % SEARCH_SIGNATURE,
}


def rest_url(host, model, version=None, port=8501, scheme="http"):
    """``SCHEME://HOST:PORT/v1/models/MODEL[/versions/N]:predict`` (``scheme`` ``http`` or
    ``https``). The model name is percent-encoded, all of it (TF Serving decodes it): as it is, a
    ``/``, ``?`` or ``#`` in it would address another path. ``version`` is refused unless it is a
    version TF Serving can have (`arguments.serving_version`)."""
    check_choice("scheme", scheme, tuple(DEFAULT_PORTS))
    path = "/v1/models/%s" % urllib.parse.quote(model_name(model), safe="")
    if version is not None:
        path += "/versions/%d" % serving_version(version)
    return "%s://%s:%d%s:predict" % (scheme, host, positive_int(port, "port"), path)


def model_name(model):
    """``model`` when it is a name a request can carry: a str, not empty."""
    if not text(model, "model"):
        raise BertWhiteningError("model must be a model name, got ''")
    return model


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


def text_request(sentences, format=None, dimensions=None):
    """A REST body for the ``serve_text`` signature: UTF-8 sentences in, vectors out; with
    ``dimensions``, for ``serve_text_dimensions`` (`request_dimensions`). ``format``: ``row``, or
    ``columnar`` (the default with ``dimensions``, which row format cannot carry)."""
    signature, format, dimensions = _signature_of(TEXT_SIGNATURE, format, dimensions)
    sentences = request_sentences(sentences)
    if format == "row":
        return {"signature_name": signature, "instances": sentences}
    return {"signature_name": signature, "inputs": {"text": sentences, **dimensions}}


def ids_request(input_ids, segment_ids=None, format=None, dimensions=None):
    """A REST body for ``serving_default`` (with ``dimensions``, ``serve_dimensions``; ``format``
    as `text_request` takes it); ragged id lists are padded with 0 (padding does not change a
    sentence's vector), segment ids default to zeros.

    The ids are refused as `text_request` refuses sentences, in one line naming the first bad one:
    rows that are not lists of ints, token ids outside int32's ``[0, 2**31)`` (the exported model
    refuses ids outside its vocabulary, which the client does not know), and segment ids other
    than 0, which the model refuses too (``encode`` feeds 0 alone)."""
    signature, format, dimensions = _signature_of(IDS_SIGNATURE, format, dimensions)
    input_ids, segment_ids = _request_ids(input_ids, segment_ids)
    if format == "row":
        instances = [
            {"input_ids": ids.tolist(), "segment_ids": segs.tolist()}
            for ids, segs in zip(input_ids, segment_ids, strict=True)
        ]
        return {"signature_name": signature, "instances": instances}
    return {
        "signature_name": signature,
        "inputs": {"input_ids": input_ids.tolist(), "segment_ids": segment_ids.tolist(), **dimensions},
    }


def request_dimensions(dimensions):
    """``dimensions`` as the int32 scalar ``serve_dimensions`` and ``serve_text_dimensions`` take:
    1 or more (the model refuses more than the k it keeps, which the client does not know)."""
    value = positive_int(dimensions, "dimensions")
    if value >= INT32_END:
        raise BertWhiteningError("dimensions must be below 2**31 (the model's int32), got %d" % value)
    return value


def _signature_of(signature, format, dimensions):
    """``(signature name, format, {"dimensions": d} or {})`` of a body for ``signature``'s inputs
    with ``dimensions`` (None: none) in ``format`` (None: ``row`` without ``dimensions``,
    ``columnar`` with)."""
    if format is not None:
        check_choice("request format", format, REQUEST_FORMATS)
    if dimensions is None:
        return signature, format or "row", {}
    if format == "row":
        raise BertWhiteningError(
            "dimensions is one number for the whole request, which TF Serving's row format (an entry per "
            "sentence) cannot carry: give format='columnar', or no format"
        )
    return DIMENSIONS_SIGNATURES[signature], "columnar", {"dimensions": request_dimensions(dimensions)}


def _padded(rows, name):
    """``rows`` padded with 0 to the longest (`pad_ids`), refused first when that makes more than
    `MAX_REQUEST_IDS` ids."""
    longest = max(map(len, rows), default=0)
    if len(rows) * longest > MAX_REQUEST_IDS:
        raise BertWhiteningError(
            "%s: %d rows padded to the longest, %d ids, make %d ids, more than a request's %d; "
            "send fewer or shorter rows at once" % (name, len(rows), longest, len(rows) * longest, MAX_REQUEST_IDS)
        )
    return pad_ids(rows)


def parse_response(body, rows=None, dim=None):
    """Vectors (float32 ``[batch, k]``) from a REST reply of ``serve_text`` or ``serving_default``,
    a dict or its JSON text.

    Row replies carry ``predictions`` (a list of vectors, or of ``{"embedding": ...}`` objects),
    columnar ones ``outputs`` (the array, or ``{"embedding": ...}``); an ``error`` is raised as
    RuntimeError. Anything else is refused in one line (`BertWhiteningError`): a reply of
    another signature (``serve_search``: `parse_search_response`), a value that is not a JSON
    number, and vectors that `reply_vectors` refuses (``rows`` and ``dim`` as it takes them).
    """
    outputs, row_format = _reply_outputs(body, EMBEDDING_OUTPUTS)
    # Row format of a k = 1 model may give one number a row.
    vectors = _matrix(outputs["embedding"], "embedding", one_column=row_format, width=dim)
    return reply_vectors(vectors, rows, dim)


def parse_search_response(body, rows=None, top_k=None):
    """``(ids, scores)``, int64 and float32 ``[batch, top_k]``, from a REST reply of
    ``serve_search`` (row format: ``predictions``, one ``{"ids": ..., "scores": ...}`` object a
    sentence; columnar: ``outputs``, one object of both), checked as `parse_response` checks
    vectors: ``rows`` rows and ``top_k`` columns when given, finite scores, and ids that are row
    numbers (integers from 0), as many as the scores."""
    outputs, _ = _reply_outputs(body, SEARCH_OUTPUTS)
    scores = reply_vectors(_matrix(outputs["scores"], "scores", width=top_k), rows, top_k, "scores")
    ids = _matrix(outputs["ids"], "ids", integers=True, width=top_k)
    if ids.shape != scores.shape:
        raise BertWhiteningError("the reply's ids: shape %s, its scores' %s" % (ids.shape, scores.shape))
    negative = np.argwhere(ids < 0)
    if negative.size:
        row, column = negative[0]
        raise BertWhiteningError("the reply's ids: row %d holds %d, not a row number" % (row, ids[row, column]))
    return ids, scores


def reply_json(text, where="the reply"):
    """``text`` parsed as JSON (`parse_json`), or one line saying why not."""
    return parse_json(text, where)


def _reply_outputs(body, names):
    """``({name: rows}, row format?)``: the outputs ``names`` of a REST reply (a dict or its JSON
    text), each a list with one entry per sentence (not checked further). TF Serving writes a
    signature of one output as its bare value, and of several as objects keyed by name."""
    if isinstance(body, (str, bytes, bytearray)):
        body = reply_json(body)
    if not isinstance(body, dict):
        raise BertWhiteningError("not a TF Serving predict reply: %s, not an object" % _json_kind(body))
    if "error" in body:
        raise RuntimeError("TF Serving answered with an error: %s" % body["error"])
    if "predictions" in body:
        predictions = body["predictions"]
        if not isinstance(predictions, list):
            raise BertWhiteningError("the reply's predictions are %s, not a list" % _json_kind(predictions))
        outputs = {name: [] for name in names}
        for index, prediction in enumerate(predictions):
            prediction = _named_outputs(prediction, names, "prediction %d" % index)
            for name in names:
                outputs[name].append(prediction[name])
        return outputs, True
    if "outputs" in body:
        outputs = _named_outputs(body["outputs"], names, "outputs")
        for name in names:
            if not isinstance(outputs[name], list):
                raise BertWhiteningError("the reply's %s: %s, not a list" % (name, _json_kind(outputs[name])))
        return outputs, False
    raise BertWhiteningError("not a TF Serving predict reply: no predictions, outputs or error")


def _named_outputs(value, names, where):
    """``value`` as ``{name: value}``: a bare value is the one output of a signature of one."""
    if not isinstance(value, dict):
        if len(names) > 1:
            raise BertWhiteningError(
                "the reply's %s is %s, not an object of %s (a reply of one output, as of %s)"
                % (where, _json_kind(value), ", ".join(names), REPLY_READERS[EMBEDDING_OUTPUTS])
            )
        return {names[0]: value}
    check_reply_outputs(value, names)
    return value


def check_reply_outputs(outputs, names):
    """Refuse a reply (a REST object or a gRPC ``outputs`` map) without one of ``names``, naming
    the outputs it has and, when they are another signature's, what reads them."""
    missing = [name for name in names if name not in outputs]
    if missing:
        present = tuple(sorted(outputs))
        reader = ": a reply of %s" % REPLY_READERS[present] if present in REPLY_READERS else ""
        raise BertWhiteningError(
            "the reply has no %s output (it has %s%s)" % (missing[0], ", ".join(present) or "none", reader)
        )


def _matrix(rows, name, integers=False, one_column=False, width=None):
    """``rows`` (one entry per sentence: a list of numbers, or one number when ``one_column``) as
    a float64 (or, ``integers``, int64) ``[batch, k]`` array; an empty batch is ``[0, width]``.
    JSON numbers only: numpy would read a ``"0.5"`` or a ``true`` as a number, and a list
    nested in a row as another dimension."""
    plain = {int} if integers else {int, float}
    if one_column:
        rows = [row if isinstance(row, list) else [row] for row in rows]
    for index, row in enumerate(rows):
        if not isinstance(row, list):
            raise BertWhiteningError(
                "the reply's %s: row %d is %s, not a list of numbers" % (name, index, _json_kind(row))
            )
        if not set(map(type, row)) <= plain:  # slower: numbers of other types (a dict built by hand)
            for item in row:
                if not is_number(item, whole=integers):
                    raise BertWhiteningError(
                        "the reply's %s: row %d holds %s, not %s"
                        % (name, index, _json_kind(item), "an integer" if integers else "a number")
                    )
    if not rows:
        return np.zeros((0, width or 0), np.int64 if integers else np.float64)
    try:
        return np.array(rows, dtype=np.int64 if integers else np.float64)  # float32's range is checked later
    except OverflowError:
        raise BertWhiteningError(
            "the reply's %s: a number beyond %s" % (name, "int64" if integers else "float64")
        ) from None
    except ValueError:
        raise BertWhiteningError("the reply's %s: rows of different lengths" % name) from None


def _json_kind(value):
    """A JSON value as a refusal names it: its type, and its text when it is not a container
    (whose text may be nested too deeply to print)."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "%s %s" % (kinds.get(type(value), type(value).__name__), shown(value))


def reply_vectors(vectors, rows=None, dim=None, name="embedding"):
    """``vectors`` (numbers, ``[batch, k]``) as float32 if they are what a request asked for; the
    one check of a reply's vectors (output ``name``), REST's and gRPC's: a ``[batch, k]`` matrix
    with ``rows`` rows (the request's) and ``dim`` columns when given, since a reply that lost or
    added a row would pair every later vector with the wrong sentence, and finite in float32 (a
    float64 1e300 would become inf), since a NaN vector has no cosine with anything."""
    if vectors.ndim != 2:
        raise BertWhiteningError("the reply's %s: shape %s, not [batch, k]" % (name, vectors.shape))
    if rows is not None and len(vectors) != rows:
        raise BertWhiteningError("the reply's %s: %d rows for %d sentences" % (name, len(vectors), rows))
    if dim is not None and vectors.shape[1] != dim:
        raise BertWhiteningError("the reply's %s: %d columns, not %d" % (name, vectors.shape[1], dim))
    with np.errstate(over="ignore"):
        single = vectors.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(single).all(axis=1))
    if bad.size:
        value = vectors[bad[0]][~np.isfinite(single[bad[0]])][0]
        raise BertWhiteningError("the reply's %s: row %d is not finite in float32 (%s)" % (name, bad[0], value))
    return single


class RestClient(HttpClient):
    """TF Serving's REST predict over kept connections (`HttpClient`: one per scheme, host and
    port, reopened once when found closed before a request is sent, a request never sent twice
    once it may have reached the server), with ``headers`` on every request (an API key or an
    Authorization for a gateway) and, for ``https://``, the server's certificate checked against
    the system's trust store or ``ca_file`` alone. One thread at a time; close it when done.

        with RestClient(headers={"Authorization": "Bearer " + token}, ca_file="ca.pem") as client:
            reply = client.predict("https://serving.example:8501/v1/models/encoder:predict", body)
    """

    def predict(self, url, body, timeout=TIMEOUT_SECONDS, max_bytes=MAX_REPLY_BYTES):
        """POST ``body`` (a dict) as JSON to TF Serving's REST ``url`` (``http://`` or
        ``https://``) and return the reply's JSON object, within ``timeout`` seconds for the whole
        exchange and ``max_bytes`` of reply (`HttpClient.post`). An error reply (HTTP 4xx/5xx)
        carries TF Serving's ``{"error": ...}``, which `parse_response` raises."""
        status, reply = self.post(url, json.dumps(body).encode("utf-8"), timeout, max_bytes)
        return reply_json(reply, "%s: the reply (HTTP %d)" % (url, status))

    def embed(self, url, sentences=None, *, input_ids=None, dimensions=None, timeout=TIMEOUT_SECONDS):
        """The vectors (float32 ``[batch, k]``, or ``[batch, dimensions]``) of ``sentences``
        (``serve_text``) or of ``input_ids`` (``serving_default``), one of them, as `predict`
        fetches them from ``url`` and `parse_response` checks them: one row a sentence, and
        ``dimensions`` columns when given, sent in the request (`text_request`, `ids_request`)."""
        if (sentences is None) == (input_ids is None):
            raise BertWhiteningError("give either sentences or input_ids")
        if sentences is not None:
            body, rows = text_request(sentences, dimensions=dimensions), len(sentences)
        else:
            body = ids_request(input_ids, dimensions=dimensions)
            rows = len(body["instances"] if "instances" in body else body["inputs"]["input_ids"])
        width = body.get("inputs", {}).get("dimensions")
        return parse_response(self.predict(url, body, timeout), rows=rows, dim=width)


def predict(url, body, timeout=TIMEOUT_SECONDS, max_bytes=MAX_REPLY_BYTES, headers=None, ca_file=None):
    """One `RestClient.predict` on a connection of its own, closed after it: the whole exchange
    within ``timeout`` seconds, at most ``max_bytes`` of reply, ``headers`` sent with it and, for
    ``https://``, the certificate checked against the system's trust store or ``ca_file``."""
    with RestClient(headers, ca_file) as client:
        return client.predict(url, body, timeout, max_bytes)


def _request_ids(input_ids, segment_ids):
    """``(input_ids, segment_ids)`` checked and padded to int32 arrays of one shape, for a REST
    body (`ids_request`) or a gRPC request (`grpc_request`)."""
    input_ids = _padded(id_lists(input_ids, "input_ids", INT32_END, TOKEN_ID_BOUNDS), "input_ids")
    if segment_ids is None:
        return input_ids, np.zeros_like(input_ids)
    segment_ids = _padded(id_lists(segment_ids, "segment_ids", 1, SEGMENT_ID_BOUNDS), "segment_ids")
    if segment_ids.shape != input_ids.shape:
        raise BertWhiteningError("segment_ids have shape %s, input_ids %s" % (segment_ids.shape, input_ids.shape))
    return input_ids, segment_ids


def grpc_request(model, sentences=None, input_ids=None, segment_ids=None, version=None, dimensions=None):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for either signature.

    Give ``sentences`` for ``serve_text`` or ``input_ids`` for ``serving_default``; with
    ``dimensions`` (`request_dimensions`), for ``serve_text_dimensions`` or ``serve_dimensions``.
    """
    from tensorflow_serving.apis import predict_pb2

    from bert_whitening.backend import tf

    if (sentences is None) == (input_ids is None):
        raise BertWhiteningError("give either sentences or input_ids")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name(model)
    if version is not None:
        request.model_spec.version.value = serving_version(version)
    signature = TEXT_SIGNATURE if sentences is not None else IDS_SIGNATURE
    signature, _, dimensions = _signature_of(signature, None, dimensions)
    request.model_spec.signature_name = signature
    if sentences is not None:
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(request_sentences(sentences), tf.string))
    else:
        for name, ids in zip(("input_ids", "segment_ids"), _request_ids(input_ids, segment_ids), strict=True):
            request.inputs[name].CopyFrom(tf.make_tensor_proto(ids))
    for name, value in dimensions.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value, tf.int32))
    return request


def grpc_vectors(response, rows=None, dim=None):
    """Vectors (float32 ``[batch, k]``) from a ``PredictResponse``, checked as `parse_response`
    checks a REST reply's (`reply_vectors`: ``rows`` rows and ``dim`` columns when given, all
    finite in float32)."""
    from bert_whitening.backend import tf

    check_reply_outputs(response.outputs, EMBEDDING_OUTPUTS)  # before reading it: a proto map adds a missing key
    try:
        vectors = tf.make_ndarray(response.outputs["embedding"])
    except (TypeError, ValueError) as error:
        raise BertWhiteningError("the reply's embedding: not a tensor TensorFlow reads (%s)" % error) from None
    if vectors.dtype.kind != "f":
        raise BertWhiteningError("the reply's embedding: %s, not floats" % vectors.dtype)
    return reply_vectors(vectors, rows, dim)

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

from bert_whitening.arguments import id_lists, is_number, positive_int, sentence_list, serving_version, shown, text
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.records import parse_json
from bert_whitening.names import check_choice
from bert_whitening.token_ids import pad_ids

#: `predict`'s defaults: the whole exchange, and the largest reply read (a reply of 10,000
#: vectors of 768 floats as JSON text is about 100 MB).
TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 256 << 20
#: The most ids a ``serving_default`` request may hold once padded (rows x the longest row): the
#: padded matrix is made before anything is sent, and one long row among many short ones would
#: make it of any size.
MAX_REQUEST_IDS = 1 << 24

REQUEST_FORMATS = ("row", "columnar")
TEXT_SIGNATURE = "serve_text"
IDS_SIGNATURE = "serving_default"
SEARCH_SIGNATURE = "serve_search"

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


def rest_url(host, model, version=None, port=8501):
    """``http://HOST:PORT/v1/models/MODEL[/versions/N]:predict``. The model name is
    percent-encoded, all of it (TF Serving decodes it): as it is, a ``/``, ``?`` or ``#`` in it
    would address another path. ``version`` is refused unless it is a version TF Serving can
    have (`arguments.serving_version`)."""
    path = "/v1/models/%s" % urllib.parse.quote(model_name(model), safe="")
    if version is not None:
        path += "/versions/%d" % serving_version(version)
    return "http://%s:%d%s:predict" % (host, positive_int(port, "port"), path)


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


def text_request(sentences, format="row"):
    """A REST body for the ``serve_text`` signature: UTF-8 sentences in, vectors out."""
    check_choice("request format", format, REQUEST_FORMATS)
    sentences = request_sentences(sentences)
    if format == "row":
        return {"signature_name": TEXT_SIGNATURE, "instances": sentences}
    return {"signature_name": TEXT_SIGNATURE, "inputs": {"text": sentences}}


def ids_request(input_ids, segment_ids=None, format="row"):
    """A REST body for ``serving_default``; ragged id lists are padded with 0 (padding does not
    change a sentence's vector), segment ids default to zeros.

    The ids are refused as `text_request` refuses sentences, in one line naming the first bad one:
    rows that are not lists of ints, token ids outside int32's ``[0, 2**31)`` (the exported model
    refuses ids outside its vocabulary, which the client does not know), and segment ids other
    than 0, which the model refuses too (``encode`` feeds 0 alone)."""
    check_choice("request format", format, REQUEST_FORMATS)
    input_ids, segment_ids = _request_ids(input_ids, segment_ids)
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


def predict(url, body, timeout=TIMEOUT_SECONDS, max_bytes=MAX_REPLY_BYTES):
    """POST ``body`` (a dict) as JSON to TF Serving's REST ``url`` (``http://``) and return the
    reply's JSON object, within ``timeout`` seconds for the whole exchange (connecting, sending,
    the status line, the headers and the body: a server that answers a byte at a time is cut off
    anywhere) and ``max_bytes`` of reply. An error reply (HTTP 4xx/5xx) carries TF Serving's
    ``{"error": ...}``, which `parse_response` raises. A timeout, a connection refused or reset,
    and a reply that is not HTTP or is cut short are one `BertWhiteningError` line naming ``url``."""
    if not is_number(timeout) or not timeout > 0:
        raise BertWhiteningError("timeout must be a positive number of seconds, got %s" % shown(timeout))
    max_bytes = positive_int(max_bytes, "max_bytes")
    deadline = time.monotonic() + timeout
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 80
    except (TypeError, ValueError):  # a port that is no number, or out of range; a url that is no str
        parts = port = None
    if parts is None or parts.scheme != "http" or not parts.hostname:
        raise BertWhiteningError("%s: not an http:// URL of TF Serving's REST API" % shown(url))
    payload = json.dumps(body).encode("utf-8")
    connection = _DeadlineConnection(parts.hostname, port, deadline)
    try:
        path = parts.path + ("?" + parts.query if parts.query else "")
        connection.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        chunks, size = [], 0
        while chunk := reply.read1(1 << 16):
            size += len(chunk)
            if size > max_bytes:
                raise BertWhiteningError("%s: the reply is larger than %d bytes" % (url, max_bytes))
            chunks.append(chunk)
        if reply.length:  # http.client's read1 returns what came when the connection closes early
            raise BertWhiteningError("%s: the connection closed %d bytes before the reply's end" % (url, reply.length))
    except TimeoutError:  # socket.timeout, and _DeadlineSocket's own
        raise BertWhiteningError("%s: no whole reply within %g s" % (url, timeout)) from None
    except (OSError, http.client.HTTPException, UnicodeError) as error:  # reset, refused, not HTTP
        reason = " ".join(str(error).split()) or "no reason given"
        raise BertWhiteningError("%s: the exchange failed: %s: %s" % (url, type(error).__name__, reason)) from None
    finally:
        connection.close()
    return reply_json(b"".join(chunks), "%s: the reply (HTTP %d)" % (url, reply.status))


class _DeadlineSocket(socket.socket):
    """A socket each of whose waits (connect, send, receive) ends by ``deadline``: http.client
    reads the status line and headers line by line, each line with as many receives as the
    server sends pieces, so a timeout per receive would let a server that trickles them hold
    the caller for as long as it likes."""

    def __init__(self, family, kind, proto, deadline):
        super().__init__(family, kind, proto)
        self.deadline = deadline

    def _until_deadline(self):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("past the deadline")
        self.settimeout(remaining)

    def connect(self, address):
        self._until_deadline()
        return super().connect(address)

    def sendall(self, data, *flags):  # a timeout bounds a whole sendall (Python 3.5 on)
        self._until_deadline()
        return super().sendall(data, *flags)

    def send(self, data, *flags):
        self._until_deadline()
        return super().send(data, *flags)

    def recv_into(self, buffer, *args):  # what the reply's file object reads with
        self._until_deadline()
        return super().recv_into(buffer, *args)

    def recv(self, size, *flags):
        self._until_deadline()
        return super().recv(size, *flags)


class _DeadlineConnection(http.client.HTTPConnection):
    """http.client's connection on a `_DeadlineSocket`: each address the host name resolves to
    is tried until the deadline (the name lookup itself is the system resolver's)."""

    def __init__(self, host, port, deadline):
        super().__init__(host, port)
        self.deadline = deadline

    def connect(self):
        failure = None
        for family, kind, proto, _, address in socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM):
            sock = _DeadlineSocket(family, kind, proto, self.deadline)
            try:
                sock.connect(address)
            except OSError as error:
                sock.close()
                failure = error
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client sets it
            self.sock = sock
            return
        raise failure or OSError("%s resolves to no address" % self.host)


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


def grpc_request(model, sentences=None, input_ids=None, segment_ids=None, version=None):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for either signature.

    Give ``sentences`` for ``serve_text`` or ``input_ids`` for ``serving_default``.
    """
    from tensorflow_serving.apis import predict_pb2

    from bert_whitening.backend import tf

    if (sentences is None) == (input_ids is None):
        raise BertWhiteningError("give either sentences or input_ids")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name(model)
    if version is not None:
        request.model_spec.version.value = serving_version(version)
    if sentences is not None:
        request.model_spec.signature_name = TEXT_SIGNATURE
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(request_sentences(sentences), tf.string))
    else:
        request.model_spec.signature_name = IDS_SIGNATURE
        for name, ids in zip(("input_ids", "segment_ids"), _request_ids(input_ids, segment_ids), strict=True):
            request.inputs[name].CopyFrom(tf.make_tensor_proto(ids))
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

"""Verifying an export in a fresh process, as a server would load it: every signature at once.

The child (``python -m bert_whitening.export.verify``) loads the SavedModel with TensorFlow alone
(and tensorflow-text for ``serve_text``), runs each signature it has on the verification
sentences, and writes the outputs; it dies with its parent, even by SIGKILL. An export starts it
before it saves (`FreshProcess`), so that the child's imports overlap the saving. The parent
compares the outputs with the in-memory Keras encoder:

- ``serving_default`` and ``serve_text`` must equal the encoder's vectors within the tolerance
  (``serve_text`` against bert4keras' tokenisation, so it checks the in-graph tokenizer too);
  ``serving_default`` runs the sentences as one batch, mostly padding, and each alone, with none:
  a server's graph runs the first packed and the second on every row (`unpadded_rows`);
- ``serve_search`` must agree with a FAISS ``IndexFlatIP`` of the same corpus searched with the
  served embeddings, rank by rank: each returned id's own cosine must equal FAISS's score at that
  rank (so different ids pass only where cosines tie) and the returned score must be that cosine;
- ``serve_dimensions`` and ``serve_text_dimensions``, served at each of
  `bert_whitening.export.dimensions.verified_dimensions` ``d``, must equal the encoder's vectors
  at ``n_components = d`` within the tolerance, and the vectors the same export serves at ``k``
  cut to ``d`` and renormalised within `DIMENSIONS_TOLERANCE` (the transformer's float noise,
  common to both, cancels there: what remains is the cut alone); a ``dimensions`` outside
  ``1..k`` must be refused.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

from bert_whitening.errors import ExportError
from bert_whitening.io.records import parse_json
from bert_whitening.progress import Progress
from bert_whitening.serving import DIMENSIONS_SIGNATURES, IDS_SIGNATURE, TEXT_SIGNATURE
from bert_whitening.vectors import check_vectors, l2_normalize

TOLERANCE = 1e-5
#: How far the vectors served at ``dimensions`` d may be from those served at k cut to d and
#: renormalised.
DIMENSIONS_TOLERANCE = 1e-6
#: Each signature taking ``dimensions``, and the signature serving its other inputs at k.
AT_K = {name: at_k for at_k, name in DIMENSIONS_SIGNATURES.items()}
#: The child's exit status when it could not write its response, after a last line of standard
#: error ``errno N``: the parent raises that OSError (a full disk is one line, not a traceback).
RESPONSE_NOT_WRITTEN = 3

#: Sentences the verification runs through every signature: Chinese, English, mixed, accents,
#: empty, and one longer than any maxlen.
VERIFY_SENTENCES = [
    "今天天气很好",
    "我们明天去北京看长城。",
    "花呗每月最低还款额，怎么计算？",
    "",
    "The cat sat on the mat.",
    "A man is playing a guitar!",
    "Café naïve ÉCOLE",
    "mixed 中文 and English 123",
    "这是一个很长的句子" * 20,
]


def verify(process, directory, encoder, text, corpus=None, tolerance=TOLERANCE, precision="float32"):
    """Run the export in ``directory`` in ``process`` (a `FreshProcess`) and compare every
    signature with ``encoder`` (and ``serve_search`` with FAISS over ``corpus``). Returns the
    largest difference of the embeddings; raises `ExportError` above ``tolerance``. A bfloat16
    export is compared with the same graph traced here (bfloat16's rounding follows the float32
    ops between the products to the last bit, so the in-process graph's fused layer norms would
    differ by more than float noise), and its vectors must keep `AUTO_MIN_COSINE` of float32's."""
    from bert_whitening.encoding import compiled, tokenize
    from bert_whitening.export.dimensions import refused_dimensions, verified_dimensions, whitened_coordinates
    from bert_whitening.precision import AUTO_MIN_COSINE
    from bert_whitening.tokenization.token_ids import pad_ids

    sequences, _ = tokenize(encoder, VERIFY_SENTENCES)
    ids = pad_ids(sequences)  # mostly padding: the last sentence fills maxlen
    expected = _vectors(compiled(encoder.model), ids)  # float32, whatever the process runs
    source = "the Keras encoder's vectors of the verification sentences"
    check_vectors(expected["serving_default"], source, encoder.normalize, stages=encoder.config.stages)
    coordinates = whitened_coordinates(encoder)
    k = coordinates.k if coordinates else 0
    if precision == "bfloat16":
        exact, expected = expected, _vectors(_bfloat16_export_graph(encoder.model), ids)
        lowest = min(
            float((l2_normalize(exact[name]) * l2_normalize(expected[name])).sum(axis=1).min()) for name in expected
        )
        if not lowest >= AUTO_MIN_COSINE:
            raise ExportError(
                "in bfloat16 a verification vector falls to cosine %.6f of float32 (below %g); "
                "nothing was written: export in float32" % (lowest, AUTO_MIN_COSINE)
            )
    expected["serve_text"] = expected["serving_default"]
    dimensions = verified_dimensions(k) + refused_dimensions(k) if k else []
    outputs = process.run(directory, ids, VERIFY_SENTENCES if text else [], dimensions=dimensions)
    if k:
        pooled = (compiled if precision == "float32" else _bfloat16_export_graph)(coordinates.pooled)
        pooled = pooled(ids, np.zeros_like(ids))
        expected.update(_dimensions_expected(outputs, coordinates, encoder.whitening, pooled.numpy()))
    compared = [name for name in expected if name in outputs]
    for name in compared:
        exported = "the exported %s of the verification sentences" % name
        check_vectors(outputs[name], exported, encoder.normalize, stages=encoder.config.stages)
    difference = max(float(np.abs(outputs[name] - expected[name]).max()) for name in compared)
    if not difference <= tolerance:
        raise ExportError(
            "the reloaded SavedModel differs from the Keras model by %.3g "
            "(tolerance %.3g); nothing was written" % (difference, tolerance)
        )
    if corpus is not None:
        _check_search(outputs, corpus, tolerance)
    return difference


def _dimensions_expected(outputs, coordinates, whitening, pooled):
    """``{"NAME_D": the encoder's vectors at n_components = D}`` for each signature ``NAME`` taking
    ``dimensions`` beside one in ``outputs`` and each verified ``D``, once the served vectors at
    ``D`` are those served at k cut and renormalised (`DIMENSIONS_TOLERANCE`) and ``dimensions``
    outside ``1..k`` were refused; ``pooled``: the encoder's pooled vectors of the ids."""
    from bert_whitening.export.dimensions import encoded_at, refused_dimensions, verified_dimensions

    k, expected = coordinates.k, {}
    for name, at_k in AT_K.items():
        if at_k not in outputs:
            continue
        if name + "_refused" not in outputs:
            raise ExportError("the exported SavedModel has %s and no %s; nothing was written" % (at_k, name))
        refused = sorted(outputs[name + "_refused"].tolist())
        if refused != refused_dimensions(k):
            raise ExportError(
                "%s refused dimensions %s of %s: it must answer 1..%d and refuse the rest; nothing was written"
                % (name, refused, verified_dimensions(k) + refused_dimensions(k), k)
            )
        for d in verified_dimensions(k):
            served, cut = outputs["%s_%d" % (name, d)], l2_normalize(outputs[at_k][:, :d].astype(np.float64))
            off = float(np.abs(served - cut).max())
            if not off <= DIMENSIONS_TOLERANCE:
                raise ExportError(
                    "%s at dimensions %d differs by %.3g from %s's vectors cut to %d and renormalised "
                    "(tolerance %.3g); nothing was written" % (name, d, off, at_k, d, DIMENSIONS_TOLERANCE)
                )
            expected["%s_%d" % (name, d)] = encoded_at(whitening, pooled, d)
    return expected


def unpadded_rows(ids):
    """Each row of the padded ``ids`` alone, cut after its last token: batches with no padding,
    which a server's graph runs on every row (`bert_whitening.layers.fused_bert.PACK_ABOVE_PADDING`)."""
    return [row[None, : np.count_nonzero(row)] for row in ids]


def _vectors(graph, ids):
    """``{"serving_default": graph's vectors of the padded ids as one batch,
    "serving_default_rows": of each row alone}``: what the child runs on the export's
    ``serving_default`` and the parent on the encoder it compares with."""
    return {
        "serving_default": graph(ids, np.zeros_like(ids)).numpy(),
        "serving_default_rows": np.concatenate([graph(row, np.zeros_like(row)).numpy() for row in unpadded_rows(ids)]),
    }


def _bfloat16_export_graph(model):
    """The graph a bfloat16 export of the Keras ``model`` saves, ``(ids, segments) -> vectors``,
    run as a graph (Grappler fuses each product with its bias and activation, as the server's does)."""
    from bert_whitening.backend import graph_function, tf
    from bert_whitening.layers.fused_bert import bfloat16_products, serving_graph

    spec = tf.TensorSpec([None, None], tf.int32)
    function = graph_function(lambda ids, segments: model([ids, segments], training=False), [spec, spec])
    with serving_graph(), bfloat16_products():
        return function.get_concrete_function()


def _check_search(outputs, corpus, tolerance):
    from bert_whitening.retrieval.faiss_indexes import flat_index

    ids, scores, embeddings = outputs["search_ids"], outputs["search_scores"], outputs["serving_default"]
    expected_scores, expected_ids = flat_index(corpus).search(embeddings, ids.shape[1])
    found, difference = mismatches(ids, scores, expected_ids, expected_scores, embeddings, corpus, tolerance)
    if found or not difference <= tolerance:
        raise ExportError(
            "serve_search disagrees with FAISS IndexFlatIP on the same vectors: "
            "(row, rank, id, FAISS id) %s, scores differ by up to %.3g (tolerance "
            "%.3g); nothing was written" % (found[:5], difference, tolerance)
        )


def mismatches(ids, scores, expected_ids, expected_scores, queries, corpus, tolerance):
    """``[(row, rank, id, expected id)]`` where a returned id's own cosine with its query (not
    the score returned beside it) differs from the expected score at that rank, or the score
    returned is not that cosine; plus the largest score difference. Different ids with equal
    cosines are ties, and pass."""
    cosines = np.einsum("qkd,qd->qk", np.asarray(corpus, np.float64)[ids], np.asarray(queries, np.float64))
    bad = (np.abs(cosines - expected_scores) > tolerance) | (np.abs(cosines - scores) > tolerance)
    found = [
        (int(row), int(rank), int(ids[row, rank]), int(expected_ids[row, rank]))
        for row, rank in zip(*np.nonzero(bad), strict=True)
    ]
    return found, float(np.abs(scores - expected_scores).max())


class FreshProcess:
    """A verification child started early: it imports TensorFlow (and tensorflow-text for
    ``text``) while the export is still tracing and saving, then loads the SavedModel that
    `run` names, as a server loads it, and runs its signatures. It dies with this process, even
    by SIGKILL; `close` (or leaving the ``with`` block) kills it if it is still waiting."""

    def __init__(self, text=False):
        self._stderr = tempfile.TemporaryFile()
        # No ``preexec_fn``: with one, Python forks instead of vforking, and the fork runs the
        # handlers TensorFlow's gRPC event engine registers with pthread_atfork; they restart its
        # poller in the forked child, whose epoll descriptor the close of inherited descriptors
        # then pulls away before exec ("epoll_wait error: Bad file descriptor", SIGABRT).
        # The child asks for the death signal itself (`_die_with_parent`).
        self._child = subprocess.Popen(
            [sys.executable, "-m", "bert_whitening.export.verify", "--text" if text else "--ids", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def run(self, directory, input_ids, sentences=(), scratch=None, dimensions=()):
        """Outputs of the SavedModel in ``directory``: ``serving_default`` (vectors of
        ``input_ids``), ``serving_default_rows`` (of each row alone, `unpadded_rows`),
        ``serve_text`` (of ``sentences``, when given),
        ``search_ids``/``search_scores`` when it has ``serve_search`` (fed the sentences when it
        takes text, else the ids), and for each signature taking ``dimensions`` that it has,
        ``NAME_D`` (its vectors at each of ``dimensions`` D it answers) and ``NAME_refused``
        (those it refuses). The request and response files live in ``scratch`` (default
        ``directory/.verify``, which goes with a staging directory when that is removed) and are
        removed afterwards."""
        scratch = scratch or os.path.join(directory, ".verify")
        os.makedirs(scratch, exist_ok=True)
        request, response = os.path.join(scratch, "request.npz"), os.path.join(scratch, "response.npz")
        try:
            np.savez(
                request,
                input_ids=input_ids,
                text=np.array(list(sentences), dtype=object),
                dimensions=np.array(list(dimensions), dtype=np.int32),
            )
            # A child that died before reading is not an error here (communicate ignores the
            # broken pipe): its exit status and stderr say why, below.
            with Progress("verifying the export in a fresh process", unit=None):
                self._child.communicate(json.dumps([directory, request, response]).encode() + b"\n")
            # The response appears (by rename) only once every signature ran: a child that dies
            # after it, in TensorFlow's teardown, still answered.
            if not os.path.exists(response):
                self._stderr.seek(0)
                said = self._stderr.read().decode("utf-8", "replace")
                if self._child.returncode == RESPONSE_NOT_WRITTEN:  # its one line: "errno N"
                    number = int(said.split()[-1])
                    raise OSError(number, os.strerror(number))  # about no file: the caller names its own
                raise ExportError(
                    "the exported SavedModel failed to load or run in a fresh process (exit status %s):\n%s"
                    % (self._child.returncode, said[-3000:])
                )
            with np.load(response) as outputs:
                return {name: outputs[name] for name in outputs.files}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def close(self):
        if self._child.poll() is None:
            self._child.kill()
            self._child.wait()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_in_fresh_process(directory, input_ids, sentences=(), scratch=None):
    """`FreshProcess.run` in a child started for this one call."""
    with FreshProcess(text=bool(len(sentences))) as process:
        return process.run(directory, input_ids, sentences, scratch)


def _die_with_parent(parent):
    """In the child: ask Linux to SIGKILL it when its parent dies, and exit now if the parent
    (process ``parent``) died before the request took effect."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's clean-up still kills it
        pass
    if os.getppid() != parent:
        os._exit(1)


def _run_signatures(directory, request_path, response_path):
    """Child side: load the SavedModel as a server would and run each of its signatures."""
    from bert_whitening.backend import tf

    with np.load(request_path, allow_pickle=True) as request:
        input_ids, text, dimensions = request["input_ids"], list(request["text"]), request["dimensions"].tolist()
    if text:
        import tensorflow_text  # noqa: F401  registers the tokenizer ops

    loaded = tf.saved_model.load(directory)
    ids_input = {"input_ids": tf.constant(input_ids), "segment_ids": tf.zeros_like(input_ids)}
    text_input = {"text": tf.constant(text)}
    serve_ids = loaded.signatures["serving_default"]
    graph = lambda ids, segments: serve_ids(input_ids=tf.constant(ids), segment_ids=tf.constant(segments))["embedding"]
    outputs = _vectors(graph, input_ids)
    if "serve_text" in loaded.signatures:
        outputs["serve_text"] = loaded.signatures["serve_text"](**text_input)["embedding"].numpy()
    if "serve_search" in loaded.signatures:
        searched = loaded.signatures["serve_search"](**(text_input if text else ids_input))
        outputs.update(search_ids=searched["ids"].numpy(), search_scores=searched["scores"].numpy())
    inputs = {DIMENSIONS_SIGNATURES[IDS_SIGNATURE]: ids_input, DIMENSIONS_SIGNATURES[TEXT_SIGNATURE]: text_input}
    for name in (name for name in inputs if name in loaded.signatures):
        outputs.update(_served_dimensions(loaded.signatures[name], name, inputs[name], dimensions))
    partial = response_path + ".partial"
    try:
        with open(partial, "wb") as stream:
            np.savez(stream, **outputs)
        os.replace(partial, response_path)
    except OSError as error:  # on the output's file system: full, say
        sys.stderr.write("errno %d\n" % error.errno)
        sys.stderr.flush()
        os._exit(RESPONSE_NOT_WRITTEN)
    return loaded


def _served_dimensions(signature, name, inputs, dimensions):
    """Child side: ``{NAME_D: vectors}`` of ``signature`` at each of ``dimensions`` D it answers,
    and ``{NAME_refused: the D it refuses}``."""
    from bert_whitening.backend import tf

    outputs, refused = {}, []
    for d in dimensions:
        try:
            outputs["%s_%d" % (name, d)] = signature(**inputs, dimensions=tf.constant(d, tf.int32))["embedding"].numpy()
        except tf.errors.InvalidArgumentError:
            refused.append(d)
    outputs[name + "_refused"] = np.array(refused, dtype=np.int64)
    return outputs


def _serve_one_request(text):
    """Child side of `FreshProcess`: import now, then answer the one request on stdin."""
    from bert_whitening.backend import tf  # noqa: F401  the import the parent overlaps with saving

    if text:
        import tensorflow_text  # noqa: F401
    line = sys.stdin.readline()
    if not line:
        sys.exit("no request on standard input: the export stopped before its verification")
    _held_until_exit = _run_signatures(*parse_json(line, "the verification's request"))  # noqa: F841
    # The response is written. Exit at once, with the SavedModel still held: freeing it, or the
    # interpreter's teardown, beside TensorFlow's gRPC event engine can abort the process
    # ("epoll_wait error: Bad file descriptor", SIGABRT) after the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _die_with_parent(int(sys.argv[2]))
    _serve_one_request(sys.argv[1] == "--text")

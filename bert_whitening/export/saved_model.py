"""Export an encoder (pooling, whitening and normalisation included) as one SavedModel.

The layout is TF Serving's: ``BASE/N/`` with ``N`` an integer version. Signatures:

- ``serving_default``: ``input_ids`` and ``segment_ids``, int32 ``[batch, length]`` padded with 0,
  to ``embedding``, float32 ``[batch, k]``;
- ``serve_text`` (optional): ``text``, string ``[batch]``, tokenised in the graph exactly as the
  bert4keras Tokenizer does (`bert_whitening.tokenization.graph_tokenizer`), to ``embedding``;
- ``serve_dimensions`` and ``serve_text_dimensions`` (with ``serve_text``), for an encoder with
  whitened coordinates (`bert_whitening.export.dimensions`): the same inputs and ``dimensions``,
  int32 scalar 1..k, to ``embedding``, float32 ``[batch, dimensions]``: the first ``dimensions``
  whitened coordinates, normalised (what ``encode`` gives at ``n_components = dimensions``).
  Separate signatures, not an input of the first two: TF Serving's row format needs every input
  of a signature in every instance, and a scalar in none.

The SavedModel is written to a temporary directory beside ``BASE``, loaded again in a fresh
Python process, and every signature is compared with the in-memory Keras model on sample
sentences; only then is it renamed to ``BASE/N``. A failure at any step leaves no ``BASE/N``.

Concurrent exports to one ``BASE`` cannot collide (`bert_whitening.export.layout`). The staging
directory is named ``.N.bert-whitening-tmp-PID-...`` beside the versions (TF Serving ignores
names that are not integers), and the next export removes those of a process that was killed
(`bert_whitening.io.atomic`).
"""

import contextlib
import json
import logging
import os
from typing import Optional, Tuple

import numpy as np

from bert_whitening.arguments import options_of
from bert_whitening.backend import graph_function, refuse_rows, tf, tf_writing
from bert_whitening.config import versions
from bert_whitening.errors import BertWhiteningError, ExportError
from bert_whitening.export.dimensions import whitened_coordinates
from bert_whitening.export.layout import publish, target_version
from bert_whitening.export.options import ExportOptions
from bert_whitening.export.record import RECORD, checked_export_record, file_digests
from bert_whitening.export.verify import TOLERANCE, FreshProcess, verify
from bert_whitening.io.atomic import staged_directory
from bert_whitening.io.files import open_directory
from bert_whitening.io.records import as_read
from bert_whitening.layers.fused_bert import bfloat16_copies, bfloat16_products, serving_graph

logger = logging.getLogger(__name__)


class ServingModule(tf.Module):
    """The object saved: the Keras encoder, the in-graph tokenizer when there is one, and the
    encoder's whitened coordinates (``coordinates``) when it has them, for ``serve_dimensions``.

    ``serving_default`` refuses what ``encode`` never feeds the model: rows longer than
    ``maxlen`` (``encode`` cuts sentences there; the limit also bounds a request's memory by its
    rows, docs/serving.md), rows with no token (all padding, or length 0), whose pooled vector
    would be the whitening of an empty average, a valid-looking vector of no sentence, ids
    outside ``[0, vocab_size)`` and segment ids other than 0 (``encode`` feeds 0 alone). On a
    CPU the embedding lookup itself fails on an id outside its table, but on a GPU TensorFlow's
    gather returns zeros for it, and a segment id of 1 reads a row that exists: either would
    be answered with a normal-looking vector."""

    IDS = [
        tf.TensorSpec([None, None], tf.int32, name="input_ids"),
        tf.TensorSpec([None, None], tf.int32, name="segment_ids"),
    ]
    TEXT = [tf.TensorSpec([None], tf.string, name="text")]
    DIMENSIONS = [tf.TensorSpec([], tf.int32, name="dimensions")]

    def __init__(
        self, model, maxlen, vocab_size, tokenizer=None, corpus=None, top_k=10, bfloat16=False, coordinates=None
    ):
        super().__init__()
        self.maxlen = maxlen
        self.vocab_size = vocab_size
        # The Keras model is called, not tracked: tracking it makes tf.saved_model.save trace
        # every layer for Keras' own loader, a large part of the export's time; the signatures need only
        # the variables they capture. In bfloat16 the products' weights are stored as bfloat16
        # copies in place of the float32 ones (`fused_bert.bfloat16_copies`).
        # Not tracked as an attribute (its keys are weight references, which a SavedModel
        # cannot name); the copies are saved through ``encoder_variables``.
        self.__dict__["bfloat16_copies"] = bfloat16_copies(model) if bfloat16 else {}
        self.encoder_variables = [v for v in model.variables if v.ref() not in self.bfloat16_copies]
        self.encoder_variables += list(self.bfloat16_copies.values())
        self._call_model = model.__call__
        if coordinates is not None:
            self._add_coordinates(coordinates)
        self.serve_ids = graph_function(self._embed, self.IDS)
        if tokenizer is not None:
            self.tokenizer = tokenizer
            self.serve_text = graph_function(self._embed_text, self.TEXT)
            # Not a signature: lets a Python client see the ids serve_text feeds the model.
            self.tokenize = graph_function(tokenizer.__call__, self.TEXT)
        if coordinates is not None:
            self.serve_dimensions = graph_function(self._embed_dimensions, self.IDS + self.DIMENSIONS)
            if tokenizer is not None:
                self.serve_text_dimensions = graph_function(self._embed_text_dimensions, self.TEXT + self.DIMENSIONS)
        if corpus is not None:
            # A variable, not a constant: saved under variables/, so a corpus over GraphDef's
            # 2 GB limit still exports.
            self.corpus = tf.Variable(np.asarray(corpus, dtype=np.float32), trainable=False, name="corpus")
            self.top_k = min(top_k, len(corpus))
            self.serve_search = (
                graph_function(self._search_text, self.TEXT)
                if tokenizer is not None
                else graph_function(self._search_ids, self.IDS)
            )

    def _add_coordinates(self, coordinates):
        """``coordinates`` (`Coordinates`, called as the model is: not tracked) as one function of
        the ids that ``serving_default`` normalises whole and ``serve_dimensions`` cut: the
        transformer is traced once for both."""
        self.k = coordinates.k
        self._call_coordinates = coordinates.model.__call__
        self._normalize = coordinates.normalize.__call__
        # Not a signature: the whitened coordinates before the normalisation.
        self.coordinates = graph_function(self._coordinates_of, self.IDS)

    def _coordinates_of(self, input_ids, segment_ids):
        return self._call_coordinates(list(self._checked_ids(input_ids, segment_ids)), training=False)

    def _checked_ids(self, input_ids, segment_ids):
        """``(input_ids, segment_ids)`` read only after the checks below have passed."""
        checks = [
            # Without this, segment_ids of another shape would be broadcast, not refused.
            tf.debugging.assert_equal(
                tf.shape(input_ids), tf.shape(segment_ids), message="input_ids and segment_ids must have the same shape"
            ),
            tf.debugging.assert_less_equal(
                tf.shape(input_ids)[1],
                self.maxlen,
                message="input_ids longer than the exported maxlen %d, where encode cuts sentences" % self.maxlen,
            ),
            refuse_rows(
                tf.reduce_all(tf.equal(input_ids, 0), axis=1),
                "input_ids rows with no token (all 0, the padding id), counting from 0:",
            ),
            refuse_rows(
                tf.reduce_any((input_ids < 0) | (input_ids >= self.vocab_size), axis=1),
                "input_ids rows with an id outside the vocabulary [0, %d), counting from 0:" % self.vocab_size,
            ),
            refuse_rows(
                tf.reduce_any(tf.not_equal(segment_ids, 0), axis=1),
                "segment_ids rows with a segment id other than 0 (encode feeds 0), counting from 0:",
            ),
        ]
        # The model reads its inputs only after the checks: nothing else orders a stateless op
        # (the position table's sum, which fails on too long a row) after an assertion.
        with tf.control_dependencies(checks):
            return tf.identity(input_ids), tf.identity(segment_ids)

    def _embed(self, input_ids, segment_ids):
        if hasattr(self, "coordinates"):  # the model is its whitened coordinates normalised
            return {"embedding": self._normalize(self.coordinates(input_ids, segment_ids))}
        return {"embedding": self._call_model(list(self._checked_ids(input_ids, segment_ids)), training=False)}

    def _embed_text(self, text):
        input_ids = self.tokenize(text)
        return self.serve_ids(input_ids, tf.zeros_like(input_ids))

    def _embed_dimensions(self, input_ids, segment_ids, dimensions):
        """The first ``dimensions`` whitened coordinates, normalised."""
        dimensions, input_ids = self._checked_dimensions(dimensions, input_ids)
        return {"embedding": self._normalize(self.coordinates(input_ids, segment_ids)[:, :dimensions])}

    def _checked_dimensions(self, dimensions, input_ids):
        """``(dimensions, input_ids)`` read only once ``dimensions`` is known to be in ``1..k``
        (so the model does not run on a refused request): refused, not clipped as a slice would."""
        check = tf.debugging.Assert(
            (dimensions >= 1) & (dimensions <= self.k),
            ["dimensions must be from 1 to the %d whitened dimensions kept, got" % self.k, dimensions],
        )
        with tf.control_dependencies([check]):
            return tf.identity(dimensions), tf.identity(input_ids)

    def _embed_text_dimensions(self, text, dimensions):
        input_ids = self.tokenize(text)
        return self.serve_dimensions(input_ids, tf.zeros_like(input_ids), dimensions)

    def _nearest(self, embedding):
        """Exact cosine (the embeddings and corpus rows are unit vectors) and the top k."""
        scores, ids = tf.math.top_k(tf.matmul(embedding, self.corpus, transpose_b=True), k=self.top_k)
        return {"ids": tf.cast(ids, tf.int64), "scores": scores}

    def _search_ids(self, input_ids, segment_ids):
        return self._nearest(self.serve_ids(input_ids, segment_ids)["embedding"])

    def _search_text(self, text):
        return self._nearest(self.serve_text(text)["embedding"])

    def signatures(self):
        """The signatures by name, as the functions themselves: ``tf.saved_model.save`` traces
        them once, in its own context (a concrete function traced before it would be traced
        again there)."""
        signatures = {"serving_default": self.serve_ids}
        for name in ("serve_text", "serve_dimensions", "serve_text_dimensions"):
            if hasattr(self, name):
                signatures[name] = getattr(self, name)
        if hasattr(self, "serve_search"):
            signatures["serve_search"] = self.serve_search
        return signatures


def export_saved_model(
    encoder,
    base: str,
    options: ExportOptions = ExportOptions(),
    *,
    metadata: Optional[dict] = None,
    corpus: Optional[np.ndarray] = None,
    tolerance: float = TOLERANCE,
) -> Tuple[str, float]:
    """Write ``encoder`` to ``BASE/N``, verified in a fresh process, and return ``(path,
    largest difference found)``.

    Args:
        encoder: a `bert_whitening.models.Encoder`, usually from `with_whitening`.
        base: TF Serving's model base directory.
        options: an `ExportOptions` (version, ``text``, ``overwrite``, ``top_k``, precision).
        metadata: more entries for ``assets/bert_whitening.json``.
        corpus: unit vectors of the encoder's dimension for a ``serve_search`` signature that
            returns the ``top_k`` nearest rows, verified against FAISS
            (`bert_whitening.export.verify`).
        tolerance: the largest difference allowed between the reloaded model and ``encoder``.

    Raises:
        ExportError: refused, or failed; nothing is left at ``BASE/N``.
    """
    options_of(ExportOptions, options, error=ExportError)
    encoder.config.check_exportable(options.text, options.precision)
    number = target_version(base, options.version, options.overwrite, encoder.config.read_paths())
    module = _serving_module(encoder, options, corpus)
    with FreshProcess(options.text) as checker, staged_directory(os.path.join(base, str(number))) as staging:
        with tf_writing(base, "the SavedModel", staging, ExportError), serving_graph(), _products(module):
            tf.saved_model.save(module, staging, signatures=module.signatures())  # traced here, run by TF Serving
        os.makedirs(os.path.join(staging, "assets"), exist_ok=True)
        # The staged directory is held open from here to the rename: the files hashed into the
        # record, the SavedModel the child loads (through this descriptor) and the files
        # checked again after it are this directory's, whatever is renamed to its name.
        held = open_directory(staging)
        try:
            record = {
                **export_record(encoder, module, metadata),
                "precision": options.precision,
                "files": file_digests(held, staging),
            }
            with open(os.path.join(staging, RECORD), "w", encoding="utf-8") as stream:
                json.dump(record, stream, indent=2, ensure_ascii=False)
            difference = verify(checker, held_path(held), encoder, options.text, corpus, tolerance, options.precision)
            target = _publish_verified(held, staging, base, record, number, options)
        finally:
            os.close(held)
    logger.info(
        "exported %s (signatures: %s); the reloaded model differs from the Keras model by at most %.2g",
        target,
        ", ".join(sorted(module.signatures())),
        difference,
    )
    return target, difference


def _serving_module(encoder, options, corpus):
    """The `ServingModule` of ``encoder``: its in-graph tokenizer with ``options.text``, its
    corpus for ``serve_search`` (``top_k`` cut to the corpus's rows, with a warning), its
    products' bfloat16 copies for a bfloat16 export, its whitened coordinates for
    ``serve_dimensions`` when it has them (`bert_whitening.export.dimensions`)."""
    tokenizer = None
    if options.text:
        from bert_whitening.tokenization.graph_tokenizer import GraphTokenizer

        tokenizer = GraphTokenizer(encoder.vocab, encoder.maxlen, encoder.lowercase)
    bfloat16 = options.precision == "bfloat16"
    module = ServingModule(
        encoder.model,
        encoder.maxlen,
        len(encoder.vocab),
        tokenizer,
        corpus,
        options.top_k,
        bfloat16=bfloat16,
        coordinates=whitened_coordinates(encoder),
    )
    if corpus is not None and module.top_k < options.top_k:
        logger.warning(
            "top_k %d is more than the %d corpus rows: serve_search returns %d",
            options.top_k,
            len(corpus),
            module.top_k,
        )
    return module


def _publish_verified(held, staging, base, record, number, options):
    """Rename the verified ``staging`` (open as ``held``) to ``BASE/number`` as ``options`` say
    (an automatic version moves on, ``overwrite``) once it is checked unchanged, and refuse it
    when another directory was renamed over it meanwhile: what is published is what was
    verified."""
    _check_unchanged(held, staging, base, record)
    published = publish(staging, base, number, options.version is None, options.overwrite)
    if not os.path.samestat(os.stat(published), os.fstat(held)):  # renamed over it since the check
        raise ExportError("%s is not the export that was verified: do not serve it, export again" % published)
    return published


def held_path(descriptor):
    """A path to the directory open as ``descriptor`` that other processes (the verification
    child) resolve to that very directory, not to whatever bears its name."""
    return "/proc/%d/fd/%d" % (os.getpid(), descriptor)


def _check_unchanged(held, staging, base, record):
    """Refuse a staged export whose files or record changed since they were hashed (while the
    child verified it), or that is no longer the directory named ``staging``: what is published
    must be what was verified."""
    try:
        checked = checked_export_record(held, staging)
    except BertWhiteningError as error:
        raise ExportError(
            "%s: the staged export changed while it was verified, nothing was written (%s)" % (base, error)
        ) from None
    if checked != as_read(record) or not os.path.samestat(os.stat(staging), os.fstat(held)):
        raise ExportError(
            "%s: the staged export's record changed, or another directory was renamed over it, while it "
            "was verified; nothing was written" % base
        )


def _products(module):
    """The export's products: bfloat16 reading the module's copies, when it has them."""
    return bfloat16_products(module.bfloat16_copies) if module.bfloat16_copies else contextlib.nullcontext()


def export_record(encoder, module, metadata=None):
    """``assets/bert_whitening.json``: the encoder's record (`EncoderConfig.to_config`), the
    signatures, versions, and ``metadata`` (``corpus``: what ``serve_search`` holds, given its
    ``top_k``)."""
    record = {
        **encoder.config.to_config(),
        **(metadata or {}),
        "signatures": sorted(module.signatures()),
        "versions": versions(),
    }
    whitening = record["whitening"] or {}
    if "sha256" in whitening:  # the key earlier versions wrote
        record["whitening_file"] = {"name": os.path.basename(whitening["path"]), "sha256": whitening["sha256"]}
    if hasattr(module, "serve_search"):
        record["corpus"] = {**record.get("corpus", {}), "top_k": module.top_k}
    return record

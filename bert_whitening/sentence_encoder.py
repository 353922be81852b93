"""`SentenceEncoder`: the front door for Python users, as the command line uses it.

    from bert_whitening import SentenceEncoder

    encoder = SentenceEncoder.load("chinese_L-12_H-768_A-12", pooling="first-last-avg")
    encoder.fit(files=["corpus.txt"], n_components=256)   # the whitening, fitted and applied
    vectors = encoder.encode(["今天天气很好", "今天天气不错"])   # whitened, L2-normalised
    encoder.save("my-encoder")                            # config + whitening; load("my-encoder")
    encoder.export("/srv/models/encoder", text=True)     # one SavedModel for TF Serving

What the vectors are is one `bert_whitening.config.EncoderConfig` (``encoder.config``); the Keras
graph is built from it on first use (TensorFlow is imported then, not before).
"""

import dataclasses
import functools
import inspect
import itertools
import json
import logging
import os
from typing import TYPE_CHECKING, Iterable, Optional, Sequence, Union

import numpy as np

from bert_whitening.arguments import (
    boolean,
    optional_path,
    options_from,
    path_list,
    positive_int,
    sentence_list,
    sentence_stream,
    split_keywords,
    vector_array,
)
from bert_whitening.arguments import path as path_argument
from bert_whitening.checkpoints import find_model
from bert_whitening.config import EncoderConfig
from bert_whitening.data import ReadOptions, check_readable, display_name, read_sentences
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.atomic import (
    check_output_directory,
    check_outputs,
    publish_directory,
    staged_directory,
    write_atomically,
)
from bert_whitening.io.records import read_record
from bert_whitening.names import DEFAULT_POOLING
from bert_whitening.precision import resolve_before_fitting
from bert_whitening.precision import running as running_precision
from bert_whitening.sentence_transformers_names import check_encode_keywords, check_output_precision, quantized
from bert_whitening.vectors import check_vectors, l2_normalize
from bert_whitening.whitening import FitOptions, Whitening, WhiteningStats, fit_reported

if TYPE_CHECKING:
    from bert_whitening.export.options import ExportOptions

logger = logging.getLogger(__name__)

#: Files of a directory written by `SentenceEncoder.save`.
CONFIG_FILE, WHITENING_FILE, FLOW_FILE = "sentence_encoder.json", "whitening.npz", "flow.npz"


def _saved_loaded_alone(load):
    """`SentenceEncoder.load` taking a directory written by `save` as saved, and refusing any
    other argument its caller gave with it, a default value given too (ignored, it would have
    been taken for applied): which arguments were given is known here, from the call."""
    signature = inspect.signature(load)

    @functools.wraps(load)
    def loaded(cls, *arguments, **options):
        given = signature.bind(cls, *arguments, **options).arguments
        model = optional_path(given.get("model"), "model")
        if not (model and os.path.lexists(os.path.join(model, CONFIG_FILE))):  # a FIFO there is named as such
            return load(cls, *arguments, **options)
        others = [name for name in given if name not in ("cls", "model")]
        if others:
            raise BertWhiteningError(
                "%s: a saved encoder is loaded as saved: %s given (load it alone, or load its model with them)"
                % (model, ", ".join(others))
            )
        return cls._load_saved(model)

    return loaded


class SentenceEncoder:
    """A BERT checkpoint, a pooling and optionally a whitening, as one sentence encoder."""

    def __init__(self, model, *arguments, **options):
        """An encoder of the `EncoderConfig` ``model`` given alone, or, as sentence-transformers'
        constructor loads its model, of what `load` takes: ``SentenceEncoder("minilm", pooling="cls")``
        is ``SentenceEncoder.load("minilm", pooling="cls")``. ``device`` is taken as
        sentence-transformers' (None or ``"cpu"``: TensorFlow's CPU) and refused otherwise."""
        if "device" in options:
            check_encode_keywords({"device": options.pop("device")})
        if isinstance(model, EncoderConfig):
            if arguments or options:
                raise BertWhiteningError(
                    "an EncoderConfig is given alone: %d more arguments beside it (its fields are its settings)"
                    % (len(arguments) + len(options))
                )
            config = model
            config.check()  # refuse what does not fit the model before any weights are read
        else:
            config = type(self).load(model, *arguments, **options).config
        self._config = config
        self._pooled = None  # the unwhitened Keras encoder, shared by fit and the whitened one
        self._encoder = None

    @property
    def config(self) -> EncoderConfig:
        """What this encoder's vectors are (frozen, and not to be replaced from outside: the
        Keras encoders built from it are kept, and `save` records it)."""
        return self._config

    def __reduce__(self):
        """Copied and pickled as its configuration (`EncoderConfig` pickles as numpy): the
        Keras models built are not, and are built again on first use."""
        return SentenceEncoder, (self._config,)

    @classmethod
    @_saved_loaded_alone
    def load(
        cls,
        model: Optional[str] = None,
        whitening: Union[str, Whitening, None] = None,
        n_components: Optional[int] = None,
        *,
        model_type: str = "bert",
        pooling: Optional[str] = None,
        maxlen: int = 64,
        lowercase: bool = True,
        normalize: bool = True,
        allow_rank_deficient: bool = False,
        flow=None,
    ) -> "SentenceEncoder":
        """An encoder of ``model`` (a Google-format or Hugging Face BERT directory, None or
        ``minilm`` for the built-in all-MiniLM-L6-v2, or a directory written by `save`).

        Args:
            whitening: a whitening file from ``fit`` (or a `Whitening`); None for pooled vectors.
            n_components: whitened dimensions to keep: 0 none, negative all, None the file's.
            pooling: default: the whitening's, else ``first-last-avg``.
            normalize: end with the L2 normalisation (cosine = dot product).
            flow: a flow file from ``fit --method flow`` (or a `bert_whitening.flow.Flow`), in
                place of the whitening.

        A directory written by `save` is loaded as saved: any other argument given with it
        (at its default value too) is refused, not ignored.
        """
        return cls(
            load_config(
                model=model,
                model_type=model_type,
                pooling=pooling,
                maxlen=maxlen,
                lowercase=lowercase,
                whitening=whitening,
                n_components=n_components,
                normalize=normalize,
                allow_rank_deficient=allow_rank_deficient,
                flow=flow,
            )
        )

    @classmethod
    def _load_saved(cls, directory):
        path = os.path.join(directory, CONFIG_FILE)
        record = read_record(path, what="saved encoder record")
        whitening_path = os.path.join(directory, WHITENING_FILE)
        whitening = Whitening.load(whitening_path) if os.path.exists(whitening_path) else None
        flow_path, flow = os.path.join(directory, FLOW_FILE), None
        if os.path.exists(flow_path):
            from bert_whitening.flow import Flow

            flow = Flow.load(flow_path)
        config = EncoderConfig.from_config(record, whitening, flow=flow, where=path)
        return cls(
            dataclasses.replace(
                config, whitening_path=whitening_path if whitening else None, flow_path=flow_path if flow else None
            )
        )

    @property
    def dim(self) -> int:
        return self.config.dim

    def get_sentence_embedding_dimension(self) -> int:
        """sentence-transformers' name of `dim`: the width of the vectors `encode` returns."""
        return self.dim

    @property
    def max_seq_length(self) -> int:
        """sentence-transformers' name of ``maxlen``: tokens a sentence is cut to, [CLS] and [SEP] included."""
        return self.config.maxlen

    @max_seq_length.setter
    def max_seq_length(self, value):
        raise BertWhiteningError(
            "max_seq_length is this encoder's maxlen, which its whitening and records are bound to: "
            "load a SentenceEncoder with maxlen=%r" % (value,)
        )

    @property
    def keras_encoder(self):
        """The `bert_whitening.models.Encoder` (Keras model, tokenizer), built on first use."""
        if self._encoder is None:
            from bert_whitening.models import finish

            self._encoder = finish(self._pooled_encoder(), self.config)
        return self._encoder

    def _unwhitened_config(self):
        return dataclasses.replace(
            self.config,
            whitening=None,
            n_components=None,
            normalize=False,
            whitening_path=None,
            flow=None,
            flow_path=None,
        )

    def _pooled_encoder(self):
        if self._pooled is None:
            from bert_whitening.models import build

            self._pooled = build(self._unwhitened_config())
        return self._pooled

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 128,
        progress=None,
        *,
        show_progress_bar: Optional[bool] = None,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        precision: str = "float32",
        codes: Optional[str] = None,
        **sentence_transformers,
    ):
        """float32 vectors of ``sentences``, in order, as this encoder makes them (whitened and
        L2-normalised when it is), ``progress`` as `bert_whitening.encoding.encode_ids` takes it.

        sentence-transformers' keywords mean what they mean there: ``show_progress_bar``
        (``progress``, not both), ``normalize_embeddings`` (L2-normalise what the encoder does not),
        ``convert_to_numpy=False`` (a list of rows), ``precision`` (the output's:
        `bert_whitening.sentence_transformers_names.OUTPUT_PRECISIONS`); its others are refused
        in one line naming our equivalent (`ENCODE_KEYWORDS`). ``codes`` (None: the whitening's,
        `bert_whitening.codes`) gives int8 or packed binary rows instead of floats, as ``encode``
        writes them. All are checked before the model."""
        from bert_whitening.encoding import encode

        sentences, batch_size = sentence_list(sentences), positive_int(batch_size, "batch_size")  # before the model
        if show_progress_bar is not None:
            if progress is not None:
                raise BertWhiteningError("progress and show_progress_bar say the same: give one")
            progress = boolean(show_progress_bar, "show_progress_bar")
        normalize_embeddings = boolean(normalize_embeddings, "normalize_embeddings")
        convert_to_numpy = boolean(convert_to_numpy, "convert_to_numpy")
        precision = check_output_precision(precision)
        check_encode_keywords(sentence_transformers)
        quantizer = self.config.quantizer(codes)
        if quantizer.codes != "float32" and (precision != "float32" or normalize_embeddings):
            raise BertWhiteningError(
                "codes %r are the output: precision and normalize_embeddings are for floats" % quantizer.codes
            )
        vectors = encode(self.keras_encoder, sentences, batch_size, progress)
        vectors = check_vectors(vectors, "the sentences", self.config.normalize, stages=self.config.stages)
        if normalize_embeddings and not self.config.normalize:
            vectors = l2_normalize(vectors)
        vectors = quantized(vectors, precision) if quantizer.codes == "float32" else quantizer.encode(vectors)
        return vectors if convert_to_numpy else list(vectors)

    def similarity(self, a, b, batch_size: int = 128, codes: Optional[str] = None) -> np.ndarray:
        """Cosine matrix ``(len(a), len(b))`` of two lists of sentences (encoded here) or two
        arrays of vectors of this encoder (normalised here) or of its codes, as float32: the cosine
        of their ``codes`` (None: the encoder's, `bert_whitening.config.EncoderConfig.quantizer`),
        `bert_whitening.codes.Quantizer.cosine_matrix`, float vectors quantised first."""
        coder = self.config.quantizer(codes)
        a, b = self._code_sides((("a", a), ("b", b)), batch_size, coder)
        return coder.cosine_matrix(a, b).astype(np.float32)

    def similarity_pairwise(self, a, b, batch_size: int = 128, codes: Optional[str] = None) -> np.ndarray:
        """Cosine of each row of ``a`` with the same row of ``b`` (``(n,)``, float32), as
        sentence-transformers' ``similarity_pairwise``; ``a``, ``b`` and ``codes`` as `similarity`
        takes them, of the same length (refused before anything is encoded)."""
        coder = self.config.quantizer(codes)
        a, b = self._code_sides((("a", a), ("b", b)), batch_size, coder, same_length=True)
        return coder.cosine_rows(a, b).astype(np.float32)

    def _code_sides(self, sides, batch_size, coder, same_length=False):
        """Each ``(name, value)`` of ``sides`` as ``coder``'s codes: arrays of its codes (int8 or
        uint8 rows, `_code_array`) as they are, vectors and sentences as their unit vectors'
        codes; all checked before any is encoded (`_unit_sides`)."""
        checked = [
            coder.checked(value, name) if _code_array(value, coder) else self._checked_side(value, name)
            for name, value in sides
        ]
        if same_length:
            _paired(sides, checked)
        return [side if _code_array(side, coder) else coder.encode(self._unit(side, batch_size)) for side in checked]

    def _unit_vectors(self, value, name, batch_size):
        """``value`` normalised: an array of real numbers as vectors of this encoder, sentences
        (a list, or an array of strings) encoded."""
        return self._unit_sides(((name, value),), batch_size)[0]

    def _unit_sides(self, sides, batch_size):
        """Each ``(name, value)`` of ``sides`` normalised (`_unit_vectors`), all checked before any
        is encoded: a refusal of the second comes before the first is encoded."""
        return [self._unit(self._checked_side(value, name), batch_size) for name, value in sides]

    def _unit(self, side, batch_size):
        """A checked side (`_checked_side`) as unit float vectors: sentences encoded as floats,
        whatever codes the encoder writes, and normalised."""
        return side if isinstance(side, np.ndarray) else l2_normalize(self.encode(side, batch_size, codes="float32"))

    def _checked_side(self, value, name):
        """An array of real numbers as unit vectors of this encoder, or anything else as a list of sentences."""
        if isinstance(value, np.ndarray) and value.dtype.kind not in "USO":
            value = vector_array(value, name)
            if value.shape[1] != self.dim:
                raise BertWhiteningError(
                    "%s: vectors of shape %s, not (n, %d) of this encoder" % (name, value.shape, self.dim)
                )
            check_vectors(value, name, normalized=False)  # the caller's numbers: no stage to blame
            # normalised in float64, then cast: a row beyond float32's range would become inf first
            return l2_normalize(value.astype(np.float64)).astype(np.float32)
        return sentence_list(value, name)

    def index(self, corpus: Sequence[str], path: Optional[str] = None, options=None, **keywords):
        """The sentences ``corpus`` encoded and searchable: in memory (an exact FAISS inner-product
        index), or written to the index directory ``path`` (as the ``index`` command writes one,
        with this encoder's record). ``options`` is a
        `bert_whitening.retrieval.index_directory.IndexOptions`, or its fields as ``keywords``
        (``hnsw_m`` > 0 for HNSW, ``batch_size``, ``overwrite``, ``codes`` int8 or binary for an
        index of codes whose ``rescore`` nearest candidates are ranked by their float32 cosines).
        Returns a `CorpusIndex`."""
        from bert_whitening.retrieval.index_directory import IndexDirectory, IndexOptions

        options = options_from(IndexOptions, options, keywords)
        corpus = sentence_list(corpus, "corpus")
        if options.hnsw_m and path is None:
            raise BertWhiteningError("hnsw_m is for an index written to a path; an index in memory is exact")
        if options.overwrite and path is None:
            raise BertWhiteningError("overwrite is for an index written to a path; an index in memory replaces none")
        if options.codes != "float32" and path is None:
            raise BertWhiteningError("codes are for an index written to a path; an index in memory holds float32")
        if not corpus:
            raise DataError("no sentences to index: the corpus is empty")
        if path is not None:
            from bert_whitening.retrieval.search import build_index

            build_index(dataclasses.replace(self.config, normalize=True), path, options, sentences=corpus)
            return CorpusIndex(index=IndexDirectory(path), directory=path)
        from bert_whitening.retrieval.faiss_indexes import flat_index

        vectors = self._unit_vectors(corpus, "corpus", options.batch_size)
        return CorpusIndex(encoder=self._snapshot(), index=flat_index(vectors), texts=corpus)

    def encode_file(self, path: str, output: str, batch_size: int = 128, progress=None, codes=None) -> int:
        """Write one vector per line of the sentence file ``path`` (``-``: standard input, read
        once) to the ``.npy`` ``output``, row *i* for line *i*, atomically, in ``codes`` (None:
        the whitening's; float32, or int8 or packed uint8 rows); returns the rows."""
        from bert_whitening.encoding import encode_stream
        from bert_whitening.io.npy_rows import NpyRowWriter

        path, output = path_argument(path, "path"), path_argument(output, "output")
        batch_size = positive_int(batch_size, "batch_size")  # before the model is built
        quantizer = self.config.quantizer(codes)
        inputs = [path] + self.config.read_paths()
        check_outputs([output], inputs)  # before the model is built
        sentences = read_sentences(path, "lines")
        first = next(sentences, None)  # and so is an empty input refused
        if first is None:
            raise DataError("%s: empty input" % display_name(path))
        encoder, lines = self.keras_encoder, 0

        def counted(sentences):
            nonlocal lines
            for sentence in sentences:
                lines += 1
                yield sentence

        def write(temporary):
            with NpyRowWriter(temporary, quantizer.width, quantizer.dtype) as rows:
                for vectors in encode_stream(
                    encoder, counted(itertools.chain([first], sentences)), batch_size, progress
                ):
                    checked = check_vectors(
                        vectors, display_name(path), self.config.normalize, rows.rows, stages=self.config.stages
                    )
                    rows.append(quantizer.encode(checked))
            if rows.rows != lines:  # each line is one row, or the output is wrong
                raise BertWhiteningError("wrote %d rows for %d input lines" % (rows.rows, lines))

        write_atomically(output, write, inputs=inputs)
        return lines

    def fit(
        self,
        sentences: Optional[Iterable[str]] = None,
        files: Sequence[str] = (),
        options: Optional[FitOptions] = None,
        *,
        read: Optional[ReadOptions] = None,
        progress=None,
        **keywords,
    ) -> Whitening:
        """Fit a whitening on the pooled vectors of ``sentences`` and of the sentence or pair
        ``files`` (each read once, streamed); from now on this encoder applies it (normalised).
        Returns the `Whitening` (``whitening.save(path)`` writes the file ``encode`` reads).
        ``options`` is a `bert_whitening.whitening.FitOptions` and ``read`` a
        `bert_whitening.data.ReadOptions`, or their fields as ``keywords`` (``n_components``,
        ``beta``, ``gamma``; ``format``, ``skip_bad_lines``, ``batch_size``), all checked before
        the model is built."""
        from bert_whitening.encoding import encode_stream, statistics_from_files

        fitting, reading = split_keywords(keywords, (FitOptions, ReadOptions), "fit")
        options = options_from(FitOptions, options, fitting)
        self.config.check_n_components([options.n_components])
        files, sentences, read = _fit_inputs(sentences, files, options_from(ReadOptions, read, reading, "read"))
        pooled = self._pooled_encoder()
        stats = WhiteningStats()
        if sentences is not None:
            for vectors in encode_stream(pooled, sentences, read.batch_size, progress):
                stats.update(vectors, "the sentences", stats.count, pooled.config.stages)  # checked there, once
        if files:
            stats.merge(statistics_from_files(pooled, files, read, progress))
        source = ", ".join(files) or "the sentences"
        whitening = fit_reported(
            stats,
            source,
            options,
            pooling=self.config.pooling,
            model_identity=pooled.model_identity,
            tokenization=self.config.tokenization,
            allow_rank_deficient=self.config.allow_rank_deficient,
            precision=running_precision(),
        )
        self._apply(whitening=whitening)
        return whitening

    def fit_flow(
        self,
        sentences: Optional[Iterable[str]] = None,
        files: Sequence[str] = (),
        seed: int = 0,
        *,
        read: Optional[ReadOptions] = None,
        progress=None,
        flow_batch_size: int = 64,
        **keywords,
    ):
        """Train a BERT-flow (`bert_whitening.flow.fit_flow`, with the flow's options among
        ``keywords``: ``config``, ``epochs``, ``learning_rate``) on the pooled vectors of
        ``sentences`` and ``files``, as `fit` reads them (``read``, or its fields among
        ``keywords``: ``batch_size`` sentences per forward pass); ``flow_batch_size`` is the
        flow's batch, its ``batch_size`` (BERT-flow's 64 vectors). Every option is checked before
        the model is built. From now on this encoder applies the flow, in place of a whitening
        (normalised). Returns the `bert_whitening.flow.Flow` (``flow.save(path)`` writes the file
        ``--flow`` reads). A flow trains on every vector at once: they are held in memory, unlike
        `fit`'s statistics. A bar given as ``progress`` counts the sentences encoded; the flow's
        steps get a bar of their own (True, False or None: shown as that says)."""
        from bert_whitening.flow import check_flow_options, fit_flow, training_steps

        read_names = [field.name for field in dataclasses.fields(ReadOptions)]
        flow_options = {key: value for key, value in keywords.items() if key not in read_names}
        options = check_flow_options(
            dict(flow_options, seed=seed, batch_size=flow_batch_size, progress=progress), "flow_batch_size"
        )
        reading = {key: value for key, value in keywords.items() if key in read_names}
        files, sentences, read = _fit_inputs(sentences, files, options_from(ReadOptions, read, reading, "read"))
        pooled = self._pooled_encoder()
        vectors = _kept_vectors(pooled, sentences, files, read, progress)
        training_steps(len(vectors), options["epochs"], options["batch_size"], "flow_batch_size")
        if hasattr(progress, "update"):  # a bar (as progress_of tells one): the encoding's, not the steps'
            options["progress"] = None
        flow = fit_flow(
            vectors,
            pooling=self.config.pooling,
            model_identity=pooled.model_identity,
            tokenization=self.config.tokenization,
            **options,
        )
        self._apply(flow=flow)
        return flow

    def train(self, train_file=None, output=None, valid_file=None, *, report=None, progress=None, **settings) -> dict:
        """Fine-tune this encoder's model (a plain BERT) with its pooling, maxlen and case on the
        pair file ``train_file`` and write it to the new model directory ``output``, as
        ``bert-whitening train`` does (`bert_whitening.training.train`). The run is a
        `TrainOptions` given alone in ``train_file``'s place (its model, type, pooling, maxlen and
        case replaced by this encoder's), or the files and keywords that make one (``loss``,
        ``scale``, ``threshold``, ``batch_size``, ``learning_rate``, ``epochs``, ``seed``,
        ``overwrite``, ``resume``), each checked as `TrainOptions` checks it. From now on this
        encoder is the fine-tuned model, unwhitened: a whitening or flow fitted on the base
        model's vectors does not describe the new ones. Returns the record written as
        ``training.json``."""
        from bert_whitening.training import train

        options = self._train_options(train_file, output, valid_file, settings)
        result = train(options, report=report, progress=progress)
        self._config = dataclasses.replace(
            self._unwhitened_config(), model=options.output, normalize=self.config.normalize
        )
        self._pooled = self._encoder = None
        return result.record

    def _train_options(self, train_file, output, valid_file, settings):
        """The `TrainOptions` of `train`'s arguments, with this encoder's model settings."""
        from bert_whitening.training import TrainOptions

        config = self.config
        encoder = {
            "model": config.model,
            "model_type": config.model_type,
            "pooling": config.pooling,
            "maxlen": config.maxlen,
            "lowercase": config.lowercase,
        }
        if isinstance(train_file, TrainOptions):
            if output is not None or valid_file is not None or settings:
                raise BertWhiteningError("a TrainOptions is given alone: no output, valid_file or settings beside it")
            return dataclasses.replace(train_file, **encoder)
        taken = sorted(set(encoder) & set(settings))
        if taken:
            raise BertWhiteningError(
                "%s: this encoder's own setting; load a SentenceEncoder with the one wanted" % ", ".join(taken)
            )
        return TrainOptions(train_file, output, valid_file, **encoder, **settings)

    def _snapshot(self):
        """This encoder as it is now, sharing its built models: what an in-memory index encodes
        its queries with, however this one changes later (`fit`, `train`), since the corpus
        vectors it holds were encoded so. (`_apply` and `train` replace, never alter, what they
        change.)"""
        snapshot = SentenceEncoder(self.config)
        snapshot._pooled, snapshot._encoder = self._pooled, self._encoder
        return snapshot

    def _apply(self, whitening=None, flow=None):
        """From now on, encode with this newly fitted whitening or flow (normalised)."""
        self._config = dataclasses.replace(self._unwhitened_config(), whitening=whitening, flow=flow, normalize=True)
        self._encoder = None

    def save(self, directory: str, overwrite: bool = False) -> None:
        """Write ``directory`` (new, or replaced with ``overwrite``) with the encoder's record
        (``sentence_encoder.json``: model reference, pooling, maxlen, case, k) and its whitening;
        `load` reads it back. The model itself is referenced, not copied."""
        directory = path_argument(directory, "directory")
        check_output_directory(directory, self.config.read_paths(), boolean(overwrite, "overwrite"))
        record = self.config.to_config()
        with staged_directory(directory) as staging:
            if record["whitening"] is not None:  # not when k = 0: the vectors are not whitened
                self.config.whitening.save(os.path.join(staging, WHITENING_FILE))
            if self.config.flow is not None:
                self.config.flow.save(os.path.join(staging, FLOW_FILE))
            with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as stream:
                json.dump(record, stream, indent=2, ensure_ascii=False)
            publish_directory(staging, directory, overwrite=overwrite)

    def export(self, base: str, options: Optional["ExportOptions"] = None, *, corpus: Optional[str] = None, **keywords):
        """Export as one SavedModel to ``BASE/N``, verified in a fresh process, as ``options``
        (a `bert_whitening.export.options.ExportOptions`, or its fields as ``keywords``:
        ``version``, ``text``, ``overwrite``, ``top_k``, ``precision``) say; ``corpus`` (an
        index directory made by this encoder) adds ``serve_search``. Everything is checked
        before TensorFlow. Returns ``(path, difference)`` (see
        `bert_whitening.export.export_saved_model`)."""
        from bert_whitening.export.layout import target_version
        from bert_whitening.export.options import ExportOptions

        options = options_from(ExportOptions, options, keywords)
        base, corpus = path_argument(base, "base"), optional_path(corpus, "corpus")
        target_version(base, options.version, options.overwrite, self.config.read_paths() + [corpus])
        self.config.check_exportable(options.text, options.precision)
        vectors, metadata = None, {}
        if corpus:  # the index is opened and checked before TensorFlow too
            from bert_whitening.retrieval.search import corpus_for_export

            vectors, metadata["corpus"] = corpus_for_export(corpus, self.config)
        from bert_whitening.export import export_saved_model

        return export_saved_model(self.keras_encoder, base, options, metadata=metadata, corpus=vectors)


class CorpusIndex:
    """What `SentenceEncoder.index` returns: ``search(queries, top_k)`` gives, for each query,
    ``{"query", "hits": [{"rank", "score" (cosine), "corpus_id", "file", "line", "text"}]}``
    (``corpus_id`` the corpus row from 0); in memory ``file`` is None and ``line`` the row from 1.
    An index directory is searched as the ``search`` command does: read with its checksums, the
    queries encoded with its record; it is opened (and checked) once, when written, and every
    search reads what was opened then, so another index renamed over ``directory`` is never
    searched."""

    def __init__(self, encoder=None, index=None, texts=None, directory=None):
        self.encoder, self._index, self._texts, self.directory = encoder, index, texts, directory

    def search(self, queries: Sequence[str], top_k: int = 10) -> list:
        from bert_whitening.retrieval import search

        if self.directory is not None:
            return search.search(self._index, queries, top_k)
        queries = search.search_queries(queries)
        vectors = self.encoder._unit_vectors(queries, "queries", 128)
        scores, ids = self._index.search(vectors, min(positive_int(top_k, "top_k"), len(self._texts)))
        return search.hits(queries, scores, ids, lambda row: (None, row + 1, self._texts[row]))


def _fit_inputs(sentences, files, read):
    """What `SentenceEncoder.fit` and `fit_flow` read, checked before the model is built:
    ``(files, sentences or None, read)``, ``files`` a list of readable paths
    (`bert_whitening.data.check_readable`: a stream named once); a pending ``--precision auto``
    decided as float32, for vectors that are fitted on (`resolve_before_fitting`)."""
    files = path_list(files)
    sentences = None if sentences is None else sentence_stream(sentences)
    check_readable(files)
    if sentences is None and files and all(os.path.isfile(path) and not os.path.getsize(path) for path in files):
        raise DataError("no sentences in %s" % ", ".join(files))  # as the fit would say, once the model is built
    resolve_before_fitting()
    return files, sentences, read


def _kept_vectors(pooled, sentences, files, read, progress):
    """Every pooled vector of ``sentences`` and ``files``, as one array, for a flow, which trains
    on them all at once; refused as soon as they would not fit in memory (`check_kept_vectors`),
    or when there is none."""
    from bert_whitening.encoding import check_kept_vectors, encode_stream, vector_blocks_from_files

    blocks, rows = [], 0
    for block in itertools.chain(
        encode_stream(pooled, sentences, read.batch_size, progress) if sentences is not None else (),
        vector_blocks_from_files(pooled, files, read, progress),
    ):
        rows += len(block)
        check_kept_vectors(rows, pooled.dim)
        blocks.append(block)
    if not rows:
        raise DataError("no sentences to train a flow on")
    return np.concatenate(blocks)


def load_config(*, whitening=None, flow=None, pooling=None, **fields):
    """The `EncoderConfig` of ``fields`` with a whitening or flow given as a file (read here, its
    path recorded) or as the object itself, and ``pooling`` None for the one the whitening or
    flow was fitted with, else ``first-last-avg`` (not yet checked against the model,
    `EncoderConfig.check`). A file of another model is refused unread: the model's hidden size
    is known first."""
    whitening_path = flow_path = files = hidden_size = None
    if any(isinstance(fitted, (str, os.PathLike)) for fitted in (whitening, flow)):
        files = find_model(optional_path(fields.get("model"), "model"))
        hidden_size = files.config["hidden_size"]
    if isinstance(whitening, (str, os.PathLike)):
        whitening_path, whitening = os.fspath(whitening), Whitening.load(whitening, hidden_size)
    if isinstance(flow, (str, os.PathLike)):
        from bert_whitening.flow import Flow

        flow_path, flow = os.fspath(flow), Flow.load(flow, hidden_size)
    fitted = whitening if whitening is not None else flow
    pooling = pooling or getattr(fitted, "pooling", None) or DEFAULT_POOLING  # a non-Whitening: refused
    return EncoderConfig(
        pooling=pooling,
        whitening=whitening,
        whitening_path=whitening_path,
        flow=flow,
        flow_path=flow_path,
        model_files=files,  # found once: its configuration and vocabulary are not read again
        **fields,
    )


def _code_array(value, coder):
    """Whether ``value`` is meant as ``coder``'s codes: an int8 or uint8 array, for codes other
    than float32 (a float encoder takes integer arrays as vectors)."""
    return coder.codes != "float32" and isinstance(value, np.ndarray) and value.dtype in (np.int8, np.uint8)


def _paired(sides, checked):
    """Refuse sides (``(name, value)``, checked) paired one to one that have not as many rows."""
    if len({len(side) for side in checked}) > 1:
        raise BertWhiteningError(
            "%s: rows paired one to one, got %s"
            % (" and ".join(name for name, _ in sides), " and ".join(str(len(side)) for side in checked))
        )

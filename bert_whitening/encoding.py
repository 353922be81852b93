"""Turning sentences into vectors with an `Encoder`.

The original pads a whole split to its longest sentence and calls ``predict``, so most of the
compute goes into padding. Here sentences are sorted by token count, cut into batches, each
batch is padded only to its own longest sentence, and the vectors are put back in input order.
The model runs under one ``tf.function`` whose input signature has a free batch and length, so
no length triggers a retrace; `BATCHES_IN_FLIGHT` batches run at once, in threads (each call's
vectors are the same as alone). (XLA with fixed length buckets was slower than this on
these CPUs, where oneDNN does the matrix products: docs/performance-history.md.)

How the matrix products run (float32 or bfloat16) is the process's precision,
`bert_whitening.precision`; `_graph_for` picks the graph that runs it.
"""

import collections
import collections.abc
import concurrent.futures
import contextlib
import dataclasses
import weakref
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np

from bert_whitening import precision
from bert_whitening.arguments import container, positive_int, sentence_list, sentence_stream, shown
from bert_whitening.backend import graph_function, keras, tf
from bert_whitening.data import ReadOptions, chunked, display_name, read_sentences
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.bounded import check_memory
from bert_whitening.layers.fused_bert import FusedBert, bfloat16_products
from bert_whitening.progress import progress_of
from bert_whitening.tokenization.token_ids import log_truncated, pad_ids, token_ids
from bert_whitening.vectors import check_vectors
from bert_whitening.whitening import WhiteningStats

if TYPE_CHECKING:
    from bert_whitening.models import Encoder


#: model -> {bfloat16 products?: its tf.function}, for `compiled`.
_COMPILED = weakref.WeakKeyDictionary()
#: first encoder's model -> {its poolings: (joint model, column ends)}, for `_side_by_side`.
_JOINT = weakref.WeakKeyDictionary()

#: Sentences read, tokenised and sorted together by `encode_stream`: bounds memory whatever
#: the input size, and is large enough for length sorting to pay.
CHUNK_SENTENCES = 8192

#: Model calls under way at once. TensorFlow spreads each operation over the cores, but the
#: small ones between the matrix products leave cores idle; a second batch under way fills them
#: (vectors unchanged; docs/performance.md has what it gains).
BATCHES_IN_FLIGHT = 2

_MIXED_PRECISION_OPTION = "auto_mixed_precision_onednn_bfloat16"
#: Whether Grappler's bfloat16 rewrite is on now (`_graph_for`).
_rewrite_on = False


def compiled(model, bfloat16=False):
    """``model`` under one ``tf.function`` taking int32 ``(batch, length)`` ids and segments; with
    ``bfloat16``, its `FusedBert` layers traced with their products in bfloat16."""
    functions = _COMPILED.setdefault(model, {})
    if bfloat16 not in functions:
        spec = tf.TensorSpec([None, None], tf.int32)

        def call(ids, segments):
            with bfloat16_products() if bfloat16 else contextlib.nullcontext():
                return model([ids, segments], training=False)

        functions[bfloat16] = graph_function(call, [spec, spec])
    return functions[bfloat16]


def runs_fused_bert(model):
    """Whether ``model``'s transformer is a `FusedBert`, which runs bfloat16 on its own."""
    return any(isinstance(layer, FusedBert) for layer in model.layers)


def _graph_for(model):
    """The compiled ``model`` for the running precision: in bfloat16, a FusedBert's own bfloat16
    products with Grappler's rewrite off (it would also round the whitening and the layer norms),
    any other graph under the rewrite."""
    bfloat16 = precision.running() == "bfloat16"
    fused = runs_fused_bert(model)
    grappler_rewrite(bfloat16 and not fused)
    return compiled(model, bfloat16 and fused)


def grappler_rewrite(on):
    """Turn Grappler's bfloat16 rewrite of the graphs run from now on ``on`` or off. The option is
    the process's: whatever runs a graph of its own (the training step) turns it off first, or
    an earlier bfloat16 encoding of a bert4keras graph would round it too."""
    global _rewrite_on
    if on != _rewrite_on:
        tf.config.optimizer.set_experimental_options({_MIXED_PRECISION_OPTION: on})
        _rewrite_on = on


def checked_encoder(value, name="encoder"):
    """``value`` when it is an `bert_whitening.models.Encoder`; else one `BertWhiteningError`
    naming what it got (the dict `build_encoders` returns, say, where one of its encoders or the
    list of them is asked for)."""
    from bert_whitening.models import Encoder

    if not isinstance(value, Encoder):
        hint = ": pass one of its values" if isinstance(value, collections.abc.Mapping) else ""
        raise BertWhiteningError(
            "%s must be an Encoder (of bert_whitening.models.build_encoders), got %s %s%s"
            % (name, type(value).__name__, shown(value), hint)
        )
    return value


def tokenize(encoder, texts):
    """Token ids of each text and how many of them were cut to ``encoder.maxlen``."""
    encoded = [token_ids(encoder.tokenizer, text, encoder.maxlen) for text in texts]
    return [ids for ids, _ in encoded], sum(cut for _, cut in encoded)


def batches(sequences, batch_size):
    """``(rows, ids)`` per model call: ``batch_size`` rows of ``sequences`` in order of length,
    and their ids padded to the longest of them."""
    order = np.argsort([len(ids) for ids in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        yield rows, pad_ids([sequences[row] for row in rows])


def encode_ids(
    encoder: "Encoder", sequences: Sequence[Sequence[int]], batch_size: int = 128, progress=None
) -> np.ndarray:
    """Vectors of token-id sequences as float32 ``(len(sequences), encoder.dim)``, in order.

    Args:
        encoder: an `bert_whitening.models.Encoder`.
        sequences: lists of token ids, each starting with ``[CLS]`` and ending with ``[SEP]``.
        batch_size: sentences per model call (positive).
        progress: a bar to advance (a `bert_whitening.progress.Progress`, a tqdm bar), or the
            ``show`` of a `Progress` of its own: True, False, or None (a bar on a terminal, log
            lines elsewhere).
    """
    batch_size = positive_int(batch_size, "batch_size")
    checked_encoder(encoder).config.check_encoding_memory(len(sequences), encoder.dim, batch_size, BATCHES_IN_FLIGHT)
    return _encode_checked(encoder, sequences, batch_size, progress)


def _encode_checked(encoder, sequences, batch_size, progress):
    """`encode_ids` once its arguments and memory are checked (`encode_counted` checks them
    before it tokenizes, and does not check them again)."""
    if len(sequences) and precision.process_precision() == "auto":
        precision.resolve_auto(
            _distinct(sequences, precision.AUTO_CHECK_SENTENCES),
            lambda sample: _run_batches(encoder, sample, batch_size),
        )
    return _run_batches(encoder, sequences, batch_size, progress)


def _distinct(sequences, most):
    """The first ``most`` distinct ``sequences``, in order."""
    seen, distinct = set(), []
    for sequence in sequences:
        key = tuple(sequence)
        if key not in seen:
            seen.add(key)
            distinct.append(sequence)
            if len(distinct) == most:
                break
    return distinct


def _run_batches(encoder, sequences, batch_size, progress=False):
    vectors = np.zeros((len(sequences), encoder.dim), dtype=np.float32)
    run = _graph_for(encoder.model)

    def run_batch(batch):
        rows, ids = batch
        vectors[rows] = run(tf.constant(ids), tf.zeros_like(ids)).numpy()
        return len(rows)

    with progress_of(progress, "encoding", len(sequences)) as bar:
        for done in in_flight(run_batch, batches(sequences, batch_size), BATCHES_IN_FLIGHT):
            bar.update(done)
    return vectors


def in_flight(call, items, width):
    """``call(item)`` of each of ``items``, ``width`` at a time in threads, its results in order.
    An error (or an interrupt) stops the rest: the calls under way finish, no new one starts."""
    with concurrent.futures.ThreadPoolExecutor(width, thread_name_prefix="batch") as pool:
        running = collections.deque()
        for item in items:
            running.append(pool.submit(call, item))
            if len(running) >= width:
                yield running.popleft().result()
        while running:
            yield running.popleft().result()


def encode(encoder: "Encoder", texts: Sequence[str], batch_size: int = 128, progress=None) -> np.ndarray:
    """Vectors of ``texts`` (a list of strings) as float32 ``(len(texts), encoder.dim)``, in order.

    Sentences longer than ``encoder.maxlen`` tokens are truncated, and their count is logged.

    Args:
        encoder: an `bert_whitening.models.Encoder` (whitened or not).
        texts: the sentences; an empty one is encoded as ``[CLS] [SEP]``.
        batch_size: sentences per model call; they are sorted by length first.
        progress: as in `encode_ids`.
    """
    vectors, truncated = encode_counted(encoder, texts, batch_size, progress)
    log_truncated(truncated, len(vectors), encoder.maxlen)
    return vectors


def encode_counted(encoder: "Encoder", texts: Sequence[str], batch_size: int = 128, progress=None):
    """``(vectors, truncated)``: `encode`'s vectors and how many of ``texts`` were cut to
    ``encoder.maxlen``, not logged: for a caller that counts over many calls (a Beam job's
    workers, whose driver logs the job's count once)."""
    texts = sentence_list(texts, "texts")
    batch_size = positive_int(batch_size, "batch_size")
    checked_encoder(encoder).config.check_encoding_memory(
        len(texts), encoder.dim, batch_size, BATCHES_IN_FLIGHT
    )  # before the tokenizer's minutes on a list too large to encode at once
    sequences, truncated = tokenize(encoder, texts)
    return _encode_checked(encoder, sequences, batch_size, progress), truncated


def encode_together(
    encoders: Sequence["Encoder"], texts: Sequence[str], batch_size: int = 128, progress=None
) -> list[np.ndarray]:
    """The vectors of ``texts`` from each of ``encoders`` (the unwhitened encoders of one
    `bert_whitening.models.build_encoders` call, same ``maxlen``), in order, from one forward
    pass per batch: comparing poolings costs one encoding, not one each. Whiten the vectors
    afterwards (`bert_whitening.whitening`). Arguments as `encode`'s."""
    joint, ends = _side_by_side(encoders)
    return np.split(encode(joint, texts, batch_size, progress), ends, axis=1)


def _side_by_side(encoders):
    """One `Encoder` whose vectors are those of ``encoders`` side by side (one forward pass for
    all), and the columns where each but the last ends. One encoder is itself, whitened or not;
    several must be the unwhitened encoders of one `build_encoders` call. Private: the joint
    encoder's config is the first one's."""
    if isinstance(encoders, collections.abc.Mapping):
        raise BertWhiteningError(
            "encoders must be a list of encoders, got a %s: pass list(encoders.values())" % type(encoders).__name__
        )
    container(encoders, "encoders", "encoders")
    encoders = [checked_encoder(encoder, "encoders[%d]" % number) for number, encoder in enumerate(encoders)]
    if not encoders:
        raise BertWhiteningError("encoding together needs at least one encoder")
    first = encoders[0]
    if len(encoders) == 1:
        return first, []
    for encoder in encoders:
        shared = [id(tensor) for tensor in encoder.model.inputs] == [id(tensor) for tensor in first.model.inputs]
        config = encoder.config
        if not shared or config.whitening is not None or config.flow is not None or config.normalize:
            raise BertWhiteningError(
                "encoding together takes the unwhitened encoders of one build_encoders call; "
                "%s pooling is not one of them" % config.pooling
            )
        if encoder.maxlen != first.maxlen:
            raise BertWhiteningError(
                "encoding together needs one maxlen: %d and %d given" % (first.maxlen, encoder.maxlen)
            )
    # One joint Keras model per set of poolings, so that compiled() traces it once, not per call.
    built = _JOINT.setdefault(first.model, {})
    poolings = tuple(encoder.pooling for encoder in encoders)
    if poolings not in built:
        outputs = [encoder.model.output for encoder in encoders]
        joint = keras.Model(first.model.inputs, keras.layers.Concatenate()(outputs))
        built[poolings] = joint, list(np.cumsum([output.shape[-1] for output in outputs])[:-1])
    joint, ends = built[poolings]
    return dataclasses.replace(first, model=joint), ends


def encode_stream(
    encoder: "Encoder", sentences: Iterable[str], batch_size: int = 128, progress=None
) -> Iterator[np.ndarray]:
    """Vectors of an iterable of sentences of any length, `CHUNK_SENTENCES` at a time, in
    order; the sentences cut to ``encoder.maxlen`` are counted over the whole stream and logged
    once at its end."""
    checked_encoder(encoder)
    total = truncated = 0
    for chunk in chunked(sentence_stream(sentences), CHUNK_SENTENCES):
        sequences, cut = tokenize(encoder, chunk)
        total, truncated = total + len(chunk), truncated + cut
        yield encode_ids(encoder, sequences, batch_size, progress)
    log_truncated(truncated, total, encoder.maxlen)


def encode_keyed(encoder: "Encoder", keyed: Iterable[tuple], batch_size: int = 128, progress=None):
    """``(vectors, keys)`` for each block `encode_stream` yields of the ``(key, sentence)`` pairs
    ``keyed``: the keys of the sentences it has taken wait beside it (it reads ahead of the
    vectors it yields), and each block gets its own."""
    keys = collections.deque()

    def sentences():
        for key, sentence in keyed:
            keys.append(key)
            yield sentence

    for vectors in encode_stream(encoder, sentences(), batch_size, progress):
        yield vectors, [keys.popleft() for _ in range(len(vectors))]


def statistics_from_files(
    encoder: "Encoder", paths: Sequence[str], read: ReadOptions = ReadOptions(), progress=None
) -> WhiteningStats:
    """The `WhiteningStats` of every sentence of ``paths`` (sentence or pair files, ``-`` for
    standard input), each read once and streamed as ``read`` says: what ``fit`` and ``eval
    --fit-on FILE`` fit on.
    """
    (stats,) = statistics_from_files_together([encoder], paths, read, progress)
    return stats


def statistics_from_files_together(
    encoders: Sequence["Encoder"], paths: Sequence[str], read: ReadOptions = ReadOptions(), progress=None
) -> list[WhiteningStats]:
    """`statistics_from_files` of each of ``encoders`` (as `encode_together` takes them), the
    files read and encoded once for all of them."""
    return [stats for stats, _ in _statistics_of_blocks(encoders, paths, read, progress, keep_vectors=False)]


def statistics_and_vectors_from_files_together(
    encoders: Sequence["Encoder"], paths: Sequence[str], read: ReadOptions = ReadOptions(), progress=None
) -> list[tuple[WhiteningStats, np.ndarray]]:
    """``(statistics, vectors)`` of each of ``encoders`` (as `statistics_from_files_together`
    gives the statistics, and the vectors they were accumulated from, as one array): what
    ``eval --fit-on FILE`` fits a whitening and trains a flow on, the whitening the one it
    fits without a flow."""
    return _statistics_of_blocks(encoders, paths, read, progress, keep_vectors=True)


def _statistics_of_blocks(encoders, paths, read, progress, keep_vectors):
    """``[(statistics, vectors or None)]`` of each encoder, updated block by block (`_file_blocks`)
    whether the vectors are kept or not: the statistics do not depend on it."""
    stats, kept, rows = [WhiteningStats() for _ in encoders], [[] for _ in encoders], 0
    for blocks in _file_blocks(encoders, paths, read, progress):
        if keep_vectors:
            rows += len(blocks[0])
            check_kept_vectors(rows, sum(block.shape[1] for block in blocks))
        for accumulator, held, block in zip(stats, kept, blocks, strict=True):
            accumulator.update(block)
            if keep_vectors:
                held.append(block)
    if not keep_vectors:
        return [(accumulator, None) for accumulator in stats]
    return [
        (accumulator, np.concatenate(held) if held else np.zeros((0, encoder.dim), np.float32))
        for accumulator, held, encoder in zip(stats, kept, encoders, strict=True)
    ]


def vector_blocks_from_files(
    encoder: "Encoder", paths: Sequence[str], read: ReadOptions = ReadOptions(), progress=None
) -> Iterator[np.ndarray]:
    """The vectors of every sentence of ``paths``, block by block, as `statistics_from_files`
    reads them: what ``SentenceEncoder.fit_flow`` trains a flow on (a flow needs the vectors
    themselves, kept as `check_kept_vectors` allows)."""
    for (block,) in _file_blocks([encoder], paths, read, progress):
        yield block


def check_kept_vectors(rows, width):
    """Refuse keeping ``rows`` float32 vectors of ``width`` columns (several poolings side by
    side) in memory, held block by block and then joined into one array (twice their bytes),
    when that is more than this process may use (`check_memory`): a flow trains on every
    vector at once, and a stream's length is known only as it is read, so each block is checked
    with those before it, before it is kept, and a file too large is refused at the block that
    does not fit, not by the allocator once all of it is encoded."""
    check_memory(
        "keeping the vectors of %d sentences" % rows,
        {"of float32 vectors of %d columns, held and joined" % width: 2 * 4 * rows * width},
        DataError,
        "a flow trains on every vector at once: train it on fewer sentences",
    )


def _file_blocks(encoders, paths, read, progress):
    """Each of ``encoders``' vectors of a chunk of the files' sentences, chunk after chunk, from
    one forward pass for all of them (`encode_stream`); a vector that is not a number is refused
    naming its file and line (`check_vectors`), which the statistics it goes to do not know."""
    joint, ends = _side_by_side(encoders)
    for vectors, rows in encode_keyed(joint, _file_sentences(paths, read), read.batch_size, progress):
        check_vectors(vectors, "the files", normalized=False, keys=rows, stages=joint.config.stages)  # rows name them
        yield np.split(vectors, ends, axis=1)


def _file_sentences(paths, read):
    """``((file, line), sentence)`` of each sentence of ``paths``, as it is read."""
    for path in paths:
        name = display_name(path)
        for number, sentence in read_sentences(path, read.format, read.skip_bad_lines, numbered=True):
            yield (name, number), sentence

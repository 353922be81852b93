"""``index`` and ``search`` with an encoder, and the corpus ``export --corpus`` serves.

A query is encoded by the encoder the index records (`bert_whitening.config.EncoderConfig`), with
the whitening stored in the index; a model, pooling or whitening given that differs from it is
refused, since its vectors would not be comparable with the corpus's.
"""

import glob
import itertools
import logging
import os

from bert_whitening.arguments import options_of, path_list, positive_int, sentence_list
from bert_whitening.config import EncoderConfig, whitening_digest
from bert_whitening.data import check_readable, read_sentences
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.bounded import check_memory
from bert_whitening.io.files import npy_blocks
from bert_whitening.progress import Progress
from bert_whitening.retrieval.index_directory import (
    KEYS_FILE,
    RECORD_FILE,
    TEXTS_FILE,
    IndexDirectory,
    IndexOptions,
    IndexWriter,
    index_quantizer,
)

logger = logging.getLogger(__name__)

#: Rows of a ``--from-vectors`` array added at a time.
NPY_BLOCK_ROWS = 65536


def numbered_lines(paths):
    """``((file, line), text)`` of every line of the sentence files, in order, each read once;
    the file named as it was given, as a search's hits show it."""
    for path in paths:
        for number, text in enumerate(read_sentences(path, "lines"), 1):
            yield (os.fspath(path), number), text


def build_index(
    config: EncoderConfig,
    output: str,
    options: IndexOptions = IndexOptions(),
    inputs=(),
    from_vectors: str = None,
    from_beam: str = None,
    sentences=None,
) -> int:
    """Write an index directory, as ``options`` (an `IndexOptions`) say, of the sentence files
    ``inputs`` encoded with ``config``, or of the list ``sentences`` (keyed ``MEMORY_SOURCE`` and
    their row from 1), or of vectors already encoded: ``from_vectors`` (a ``.npy``; keys and
    texts from ``inputs`` when given, else its rows) or ``from_beam`` (a ``beam-encode`` shard
    pattern; no texts). Every input is read once. Returns the number of vectors."""
    inputs = path_list(inputs, "inputs")
    check_index_sources(inputs, from_vectors, from_beam, sentences)
    options_of(IndexOptions, options)
    if not config.normalize:
        raise BertWhiteningError("an index holds L2-normalised vectors: --no-normalize cannot be used")
    read = list(inputs) + [from_vectors] + (glob.glob(from_beam) if from_beam and "://" not in from_beam else [])
    check_readable(list(inputs))
    record = config.to_config()
    source = from_beam or from_vectors or ", ".join(inputs) or "the input"
    writer = IndexWriter(
        output,
        record,
        config.dim,
        options,
        stored_whitening(config),
        source,
        flow=config.flow,
        inputs=read + config.read_paths(),
    )
    with writer:
        if from_beam:
            _add_beam(writer, from_beam, config)
        elif from_vectors and inputs:
            _add_keyed(writer, (block for _, block in npy_blocks(from_vectors, NPY_BLOCK_ROWS)), numbered_lines(inputs))
        elif from_vectors:
            _add_rows(writer, from_vectors)
        else:
            _add_encoded(writer, config, inputs, sentences, options.batch_size)
        count = writer.index.ntotal
    logger.info(
        "indexed %d vectors of dimension %d into %s (%s)", count, config.dim, output, index_summary(options, config.dim)
    )
    return count


def stored_whitening(config):
    """The whitening an index of ``config``'s vectors stores: its own when it keeps k > 0
    whitened dimensions, else none."""
    return config.whitening if config.components else None


def check_index_codes(config, options):
    """Refuse, before any model is built, ``options``' codes that an index of ``config``'s vectors
    cannot hold (int8 without a stored whitening: `index_quantizer`)."""
    index_quantizer(options.codes, config.dim, stored_whitening(config), config.components)


def index_summary(options, dim):
    """What an index of ``options`` searches and the bytes a vector takes in it, in memory."""
    from bert_whitening.codes import bytes_per_vector

    size = bytes_per_vector(options.codes, dim)
    if options.codes != "float32":
        searched = "exact search of %s codes, %d bytes a vector in memory" % (options.codes, size)
        return searched + "; the %d nearest rescored by float32 vectors on disk" % options.rescore
    return "%s, %d bytes a vector in memory" % (
        "HNSW, M=%d" % options.hnsw_m if options.hnsw_m else "exact IndexFlatIP",
        size,
    )


def index_vectors(config: EncoderConfig, output: str, vectors, options: IndexOptions = IndexOptions(), texts=None):
    """Write an index directory of ``vectors`` (unit rows, as ``config``'s encoder makes them),
    keyed ``MEMORY_SOURCE`` and their row from 1, with ``texts`` (None: none), as ``options``
    say, and return it opened (`IndexDirectory`: ``search(vectors, top_k)``). The plain Python
    way to an index of vectors already in memory, a benchmark's say."""
    options_of(IndexOptions, options)
    with IndexWriter(
        output, config.to_config(), config.dim, options, stored_whitening(config), "vectors", flow=config.flow
    ) as writer:
        for start in range(0, len(vectors), NPY_BLOCK_ROWS):
            block = vectors[start : start + NPY_BLOCK_ROWS]
            keys = [(MEMORY_SOURCE, row) for row in range(start + 1, start + len(block) + 1)]
            writer.add(block, keys, None if texts is None else list(texts[start : start + len(block)]))
    return IndexDirectory(output)


def _add_beam(writer, pattern, config):
    """Add the vectors of the ``beam-encode`` shards of ``pattern``, with their own keys,
    checked against ``config`` (`bert_whitening.beam.read_encoded`)."""
    from bert_whitening.beam import read_encoded

    keys, vectors = read_encoded(pattern, config)
    if not keys:
        raise DataError("%s: no beam-encode shards match" % pattern)
    writer.add(vectors, keys)


def _add_rows(writer, path):
    """Add the rows of the ``.npy`` ``path``, each keyed by its own number: as many keys as rows,
    whatever their count."""
    name = os.fspath(path)
    for first, block in npy_blocks(path, NPY_BLOCK_ROWS):
        writer.add(block, [(name, first + row) for row in range(1, len(block) + 1)])


def _add_encoded(writer, config, inputs, sentences, batch_size):
    """Encode the lines of ``inputs`` (or the list ``sentences``) with ``config`` and add them,
    each key kept with its text: both are written."""
    from bert_whitening.encoding import encode_keyed
    from bert_whitening.models import build

    if not inputs and sentences is None:
        raise BertWhiteningError("nothing to index: give sentence files, --from-vectors or --from-beam")
    keyed = (
        numbered_lines(inputs)
        if sentences is None
        else (((MEMORY_SOURCE, row), text) for row, text in enumerate(sentence_list(sentences), 1))
    )
    encoder = build(config)
    with Progress("encoding", leave=True) as bar:
        for vectors, pairs in encode_keyed(encoder, ((pair, pair[1]) for pair in keyed), batch_size, bar):
            writer.add(vectors, [key for key, _ in pairs], [text for _, text in pairs], config.stages)


def check_index_sources(inputs, from_vectors=None, from_beam=None, sentences=None):
    """Refuse sources of an index that would be ignored: ``beam-encode`` shards hold their own
    keys and no texts, so neither sentence files nor a ``.npy`` go with them; a list of
    ``sentences`` is indexed alone."""
    if sentences is not None and (inputs or from_vectors or from_beam):
        raise BertWhiteningError("sentences are indexed alone: give them without inputs, from_vectors or from_beam")
    if from_beam and (inputs or from_vectors):
        raise BertWhiteningError(
            "--from-beam takes its keys from the shards and indexes no texts: give it without %s"
            % ("--from-vectors" if from_vectors else "INPUT files")
        )


def _add_keyed(writer, blocks, keyed):
    """Add each block of vectors with the next keys and texts of the iterator ``keyed``; the two
    must have the same length."""
    for vectors in blocks:
        chunk = list(itertools.islice(keyed, len(vectors)))
        if len(chunk) != len(vectors):
            raise DataError(
                "%s: fewer lines than vectors: %d vectors left without a line"
                % (writer.source, len(vectors) - len(chunk))
            )
        writer.add(vectors, [key for key, _ in chunk], [text for _, text in chunk])
    extra = next(keyed, None)
    if extra is not None:
        raise DataError("%s:%d: more lines than vectors" % extra[0])


def query_config(index: IndexDirectory, model=None, pooling=None, whitening_path=None) -> EncoderConfig:
    """The encoder that made ``index``'s vectors, with its stored whitening or flow. A ``model`` (where
    the recorded directory has moved) must be the recorded one; a ``pooling`` or a whitening
    file given must equal the index's: a query must be encoded as the corpus was."""
    whitening = index.whitening()
    if whitening_path:
        from bert_whitening.whitening import Whitening

        given = Whitening.load(whitening_path)
        if whitening is None or whitening_digest(given) != whitening_digest(whitening):
            raise BertWhiteningError(
                "%s is not the whitening %s was built with (%s): refused"
                % (whitening_path, index.directory, "it has none" if whitening is None else "they differ")
            )
    if pooling and pooling != index.metadata["pooling"]:
        raise BertWhiteningError(
            "the index was built with %s pooling, not %s: refused" % (index.metadata["pooling"], pooling)
        )
    where = os.path.join(index.directory, RECORD_FILE)
    return EncoderConfig.from_config(index.metadata, whitening, model, flow=index.flow(), where=where)


#: The "file" of the rows of an index made from a list of sentences in memory.
MEMORY_SOURCE = "(sentences)"


def search_queries(queries, labels=None):
    """``queries`` as a list of str, none of them blank (searched, it would be the empty
    sentence's nearest rows, as if it were one); ``labels`` say which is blank in a refusal (the
    command line's ``QUERY 2 is empty``, ``FILE:LINE: an empty query``), else ``queries[i] is
    empty``. Every search takes its queries through it."""
    queries = sentence_list(queries, "queries")
    for number, query in enumerate(queries):
        if not query.strip():
            raise DataError(
                "%s: nothing to search for" % (labels[number] if labels else "queries[%d] is empty" % number)
            )
    return queries


def search(
    directory, queries, top_k: int = 10, model=None, pooling=None, whitening_path=None, batch_size: int = 128
) -> list:
    """For each query, its ``top_k`` nearest corpus rows: ``[{"query", "hits": [{"rank",
    "score" (cosine), "corpus_id" (the row from 0), "file", "line", "text"}]}]``, all read from
    the index directory: a path, or an `IndexDirectory` opened earlier, read from the descriptors
    checked then (what
    `SentenceEncoder.index` returns searches the index it wrote, whatever bears its name since)."""
    return next(searched(directory, [(queries, None)], top_k, model, pooling, whitening_path, batch_size))


#: Queries the command line encodes and searches at a time: what it holds of a ``--queries``
#: file, and of their hits.
QUERIES_AT_ONCE = 8192


def searched(directory, query_lists, top_k=10, model=None, pooling=None, whitening_path=None, batch_size=128):
    """`search`'s hits of each list of ``query_lists`` (``(queries, labels)`` pairs, as
    `search_queries` takes them), in order, each list read once the hits of the one before are
    out: a search of any number of queries holds one list and its hits. The first list's queries
    are checked before the index is opened, and the index (by FAISS too) before the model is
    built, once: what is refused of them is refused before TensorFlow."""
    query_lists, top_k = iter(query_lists), positive_int(top_k, "top_k")
    first = search_queries(*next(query_lists))
    index = directory if isinstance(directory, IndexDirectory) else IndexDirectory(directory)
    config = query_config(index, model, pooling, whitening_path)
    index.index  # noqa: B018  read by FAISS now: whatever is refused is refused before TensorFlow and the model
    from bert_whitening.encoding import encode
    from bert_whitening.models import build

    encoder = build(config)
    for queries in itertools.chain([first], (search_queries(*pair) for pair in query_lists)):
        scores, ids = index.search(encode(encoder, queries, batch_size, progress=False), top_k)
        rows = index.rows(set(ids.ravel().tolist()) - {-1})
        yield hits(queries, scores, ids, rows.__getitem__)


def hits(queries, scores, ids, row_of):
    """``[{"query", "hits": [{"rank", "score", "corpus_id", "file", "line", "text"}]}]`` of FAISS's
    ``scores`` and ``ids`` for ``queries``; ``row_of(id)`` gives a row's ``(file, line, text)``.
    ``corpus_id`` is the row of the index from 0, as sentence-transformers' ``semantic_search`` and
    ``serve_search``'s ``ids`` count (across files: ``line`` restarts at 1 in each). Plain Python
    numbers throughout (numpy's would stop ``json.dumps`` of the hits)."""

    def hit(rank, row, score):
        file, line, text = row_of(row)
        return {
            "rank": rank,
            "score": float(score),
            "corpus_id": int(row),
            "file": file,
            "line": int(line),
            "text": text,
        }

    return [
        {
            "query": query,
            "hits": [
                hit(rank, row, score)
                for rank, (row, score) in enumerate(zip(found.tolist(), found_scores, strict=True), 1)
                if row >= 0
            ],
        }
        for query, found, found_scores in zip(queries, ids, scores, strict=True)
    ]


def format_hits(results) -> str:
    lines = []
    for result in results:
        lines.append("query: %s" % result["query"])
        for hit in result["hits"]:
            shown = hit["text"] if hit["text"] is not None else "(%s:%d)" % (hit["file"], hit["line"])
            lines.append("  %2d  %.4f  %s" % (hit["rank"], hit["score"], shown))
    return "\n".join(lines)


def corpus_for_export(directory: str, config: EncoderConfig):
    """The vectors of an index directory for ``export --corpus``, and what the export records of
    them; refused unless the index was made by the encoder ``config`` describes, in every field
    that changes the vectors."""
    index = IndexDirectory(directory)
    differences = config.differences(index.metadata)
    if differences:
        raise BertWhiteningError(
            "%s was indexed with another encoder than the export's (export vs index: %s): "
            "refused" % (directory, "; ".join(differences))
        )
    check_memory(
        "%s: serving its corpus of %d vectors" % (directory, index.count),
        {
            "of the vectors read from the index": 4 * index.count * index.dim,
            "of the SavedModel's corpus variable": 4 * index.count * index.dim,
        },
        DataError,
    )
    vectors = index.vectors()
    logger.info(
        "serve_search corpus: %d x %d float32 = %.1f MB resident in the server",
        len(vectors),
        vectors.shape[1],
        vectors.nbytes / 1e6,
    )
    return vectors, {
        "index": os.path.abspath(directory),
        "count": len(vectors),
        "dim": int(vectors.shape[1]),
        "keys": KEYS_FILE,
        "texts": TEXTS_FILE,
    }

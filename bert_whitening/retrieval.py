"""Retrieval from a pair task: the benchmark, its metrics, FAISS timings and index directories.

The benchmark, defined so that anyone can recompute it from a split of a pair task:

- a pair is *positive* when its label says the two sentences mean the same: label 1 when every
  label of the split is 0 or 1 (ATEC, BQ, LCQMC, PAWSX), else score >= 4 on the 0-5 scale of the
  STS tasks (STS-B, STS-B-en). Labels outside both scales are refused;
- queries: the distinct first sentences of the positive pairs, in file order;
- corpus: the distinct second sentences of all pairs of the split, in file order, then the
  distinct distractor sentences that are not already in it;
- the relevant items of a query: the second sentences of its positive pairs.

Search is exact cosine (vectors are L2-normalised, so a dot product); ties are ranked by corpus
position, lower first. MRR@10 is the mean over queries of 1/rank of the first relevant item in the
top 10 (0 when there is none); Recall@k the share of queries with any relevant item in the top k.

numpy only; FAISS (``pip install '.[search]'``) is imported inside the functions that use it.
"""
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import time

import numpy as np

from bert_whitening.atomic import staged_directory
from bert_whitening.data import DataError, read_sentences
from bert_whitening.errors import BertWhiteningError

logger = logging.getLogger(__name__)

#: Score from which a 0-5 STS pair counts as positive.
POSITIVE_SCORE = 4.0
#: Depth of the ranking the metrics look at.
CUTOFF = 10
#: Files of an index directory.
INDEX_FILE, KEYS_FILE, METADATA_FILE = "index.faiss", "keys.tsv", "index.json"
#: HNSW build and search parameters (FAISS defaults are M 32, efConstruction 40, efSearch 16).
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 40, 64
#: Rows of a query block in exact search: bounds the score matrix to block x corpus floats.
SEARCH_BLOCK = 256


def faiss():
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its per-CPU-variant notes
    try:
        import faiss as module
    except ImportError:
        raise BertWhiteningError("retrieval needs FAISS: pip install 'bert-whitening[search]' "
                         "(faiss-cpu)") from None
    return module


def positive_labels(labels, where="labels"):
    """Which labels mark positive pairs (see the module docstring); ``where`` names the data in
    the error for labels on neither scale."""
    labels = np.asarray(labels, dtype=np.float64)
    if np.isin(labels, (0.0, 1.0)).all():
        return labels == 1.0
    outside = labels[(labels < 0) | (labels > 5)]
    if outside.size:
        raise DataError("%s: labels are neither all 0/1 nor 0-5 scores (found %g)"
                        % (where, outside[0]))
    return labels >= POSITIVE_SCORE


@dataclasses.dataclass
class Benchmark:
    """Queries, corpus and relevance of one split, with the rows of the pairs they come from."""

    queries: list
    query_pairs: np.ndarray  # for each query, a pair whose first sentence it is
    corpus: list
    corpus_pairs: np.ndarray  # for each corpus item from the pairs, a pair whose second it is
    relevant: list  # for each query, the set of corpus positions of its relevant items

    @property
    def distractors(self):
        return self.corpus[len(self.corpus_pairs):]


def build_benchmark(pairs, distractors=(), where="pairs"):
    """The benchmark of ``pairs`` (``[(sentence1, sentence2, label)]``) plus ``distractors``
    (an iterable of sentences)."""
    positive = positive_labels([label for _, _, label in pairs], where)
    corpus_position = {}
    for row, (_, second, _) in enumerate(pairs):
        corpus_position.setdefault(second, (len(corpus_position), row))
    query_position, relevant = {}, []
    for row, (first, second, _) in enumerate(pairs):
        if positive[row]:
            if first not in query_position:
                query_position[first] = (len(query_position), row)
                relevant.append(set())
            relevant[query_position[first][0]].add(corpus_position[second][0])
    corpus = list(corpus_position)
    extra = dict.fromkeys(s for s in distractors if s not in corpus_position)
    return Benchmark(queries=list(query_position),
                     query_pairs=np.array([row for _, row in query_position.values()], dtype=np.int64),
                     corpus=corpus + list(extra),
                     corpus_pairs=np.array([row for _, row in corpus_position.values()], dtype=np.int64),
                     relevant=relevant)


def exact_search(queries, corpus, top_k=CUTOFF):
    """``(ids, scores)`` of the ``top_k`` largest dot products of each query row with the corpus
    rows, best first, ties by lower corpus position; exact, in blocks of queries."""
    queries, corpus = np.asarray(queries), np.asarray(corpus)
    top_k = min(top_k, len(corpus))
    ids = np.zeros((len(queries), top_k), dtype=np.int64)
    scores = np.zeros((len(queries), top_k), dtype=np.result_type(queries, corpus))
    for start in range(0, len(queries), SEARCH_BLOCK):
        block = queries[start:start + SEARCH_BLOCK] @ corpus.T
        # Every item scoring at least the k-th best is a candidate, so ties at the cut are kept.
        kth = -np.partition(-block, top_k - 1, axis=1)[:, top_k - 1]
        for offset, row in enumerate(block):
            candidates = np.flatnonzero(row >= kth[offset])
            order = np.lexsort((candidates, -row[candidates]))[:top_k]
            ids[start + offset] = candidates[order]
            scores[start + offset] = row[candidates[order]]
    return ids, scores


def retrieval_metrics(ids, relevant):
    """``{"mrr@10", "recall@1", "recall@10"}`` of ranked ``ids`` (queries x at least 10 or the
    corpus size) against each query's set of relevant positions."""
    hits = np.array([[item in wanted for item in row[:CUTOFF]]
                     for row, wanted in zip(ids, relevant, strict=True)], dtype=bool).reshape(len(relevant), -1)
    found = hits.any(axis=1)
    reciprocal = np.where(found, 1.0 / (hits.argmax(axis=1) + 1), 0.0)
    return {"mrr@10": float(reciprocal.mean()), "recall@1": float(hits[:, :1].any(axis=1).mean()),
            "recall@10": float(found.mean())}


def overlap_at_k(approximate, exact):
    """Recall of an approximate index against exact search: the mean share of each query's exact
    top-k ids that the approximate top-k also returns."""
    pairs = zip(approximate, exact, strict=True)
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in pairs]))


def flat_index(vectors):
    """A FAISS ``IndexFlatIP`` (exact inner product) holding ``vectors``."""
    index = faiss().IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def hnsw_index(dim, m=HNSW_M):
    """An empty FAISS HNSW index on inner product, with this module's build/search parameters."""
    index = faiss().IndexHNSWFlat(dim, m, faiss().METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def index_bytes(index):
    """Size of the serialised index: what it takes on disk, and about what it takes in memory."""
    return int(faiss().serialize_index(index).nbytes)


@contextlib.contextmanager
def one_thread():
    """FAISS on one OpenMP thread inside the block. A lone query is not worth splitting, and on a
    busy machine OpenMP's waiting made one-query p50 20x slower with 2 threads than with 1
    (measured here); batches keep all threads."""
    before = faiss().omp_get_max_threads()
    faiss().omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss().omp_set_num_threads(before)


def latencies(search, queries, singles=200, batch=64, minimum_batched=1024):
    """``{"p50_ms", "p99_ms"}`` of one-query calls of ``search(array)`` on the first ``singles``
    queries (FAISS on one thread), and ``"qps_batch64"``: queries per second in calls of
    ``batch`` (the queries are repeated to at least ``minimum_batched`` so a small set is still
    timed over many calls)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    search(queries[:1])  # warm-up
    times = []
    with one_thread():
        for row in range(min(singles, len(queries))):
            started = time.perf_counter()
            search(queries[row:row + 1])
            times.append(time.perf_counter() - started)
    batched = queries if len(queries) >= minimum_batched else np.resize(
        queries, (minimum_batched, queries.shape[1]))
    started = time.perf_counter()
    for start in range(0, len(batched), batch):
        search(batched[start:start + batch])
    elapsed = time.perf_counter() - started
    return {"p50_ms": float(np.percentile(times, 50) * 1e3),
            "p99_ms": float(np.percentile(times, 99) * 1e3),
            "qps_batch%d" % batch: float(len(batched) / elapsed)}


def score_setting(queries, corpus, relevant, hnsw_m=HNSW_M):
    """Everything eval-retrieval reports for one setting's query and corpus vectors: exact
    metrics, FAISS flat index size and latencies, and HNSW recall against exact search."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    corpus = np.ascontiguousarray(corpus, dtype=np.float32)
    ids, _ = exact_search(queries, corpus)
    result = retrieval_metrics(ids, relevant)
    result.update(queries=len(queries), corpus=len(corpus), dim=corpus.shape[1])
    flat = flat_index(corpus)
    result["flat"] = {"index_bytes": index_bytes(flat),
                      **latencies(lambda q: flat.search(q, CUTOFF), queries)}
    hnsw = hnsw_index(corpus.shape[1], hnsw_m)
    hnsw.add(corpus)
    _, approximate = hnsw.search(queries, CUTOFF)
    result["hnsw"] = {"m": hnsw_m, "ef_search": HNSW_EF_SEARCH, "index_bytes": index_bytes(hnsw),
                      "recall@10_vs_exact": overlap_at_k(approximate, ids),
                      **latencies(lambda q: hnsw.search(q, CUTOFF), queries)}
    return result


def read_distractors(paths, skip_bad_lines=False):
    """Sentences of distractor files (every line of a sentence file, both sentences of a pair)."""
    for path in paths:
        yield from read_sentences(path, "auto", skip_bad_lines)


# --- index directories -------------------------------------------------------------------


class IndexWriter:
    """Builds an index directory (FAISS index, keys, metadata) in a staging directory and renames
    it into place on success, so a failure leaves nothing at ``output``. Vectors are added in
    chunks with their ``(file, line)`` keys, so a corpus of any size streams through."""

    def __init__(self, output, dim, metadata, hnsw_m=0):
        """``metadata``: what made the vectors (model, pooling, whitening, k), for `search`."""
        if os.path.exists(output):
            raise BertWhiteningError("%s already exists; choose a new index directory" % output)
        self.output, self.dim, self.metadata, self.hnsw_m = output, dim, metadata, hnsw_m
        self.index = hnsw_index(dim, hnsw_m) if hnsw_m else faiss().IndexFlatIP(dim)

    def __enter__(self):
        self._staging_context = staged_directory(self.output)
        self.staging = self._staging_context.__enter__()
        self.keys = open(os.path.join(self.staging, KEYS_FILE), "w", encoding="utf-8", newline="\n")
        return self

    def add(self, vectors, keys):
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise BertWhiteningError("vectors of shape %s for an index of dimension %d (first key %s:%s)"
                             % (vectors.shape, self.dim, *keys[0]))
        if len(keys) != len(vectors):
            raise BertWhiteningError("%d keys for %d vectors" % (len(keys), len(vectors)))
        norms = np.linalg.norm(vectors, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1) > 1e-3)
        if bad.size:
            raise BertWhiteningError("%s:%s: vector of norm %.4g; an index holds L2-normalised vectors "
                             "(encode without --no-normalize)" % (*keys[bad[0]], norms[bad[0]]))
        for path, line in keys:
            if "\t" in path or "\n" in path:
                raise BertWhiteningError("file name %r: tabs and newlines cannot be keys" % path)
            self.keys.write("%s\t%d\n" % (path, line))
        self.index.add(np.ascontiguousarray(vectors))

    def __exit__(self, kind, error, traceback):
        self.keys.close()
        try:
            if kind is None:
                if self.index.ntotal == 0:
                    raise BertWhiteningError("no vectors to index")
                self._write()
        except BaseException as failure:
            self._staging_context.__exit__(type(failure), failure, failure.__traceback__)
            raise
        return self._staging_context.__exit__(kind, error, traceback)

    def _write(self):
        faiss().write_index(self.index, os.path.join(self.staging, INDEX_FILE))
        metadata = {**self.metadata, "count": int(self.index.ntotal), "dim": self.dim,
                    "index": "hnsw" if self.hnsw_m else "flat", "hnsw_m": self.hnsw_m or None}
        with open(os.path.join(self.staging, METADATA_FILE), "w", encoding="utf-8") as stream:
            json.dump(metadata, stream, indent=2, ensure_ascii=False)
        os.rename(self.staging, self.output)


def read_metadata(directory):
    """The JSON of an index directory, with an error naming what is missing."""
    for name in (INDEX_FILE, KEYS_FILE, METADATA_FILE):
        if not os.path.exists(os.path.join(directory, name)):
            raise BertWhiteningError("%s: not an index directory (no %s)" % (directory, name))
    with open(os.path.join(directory, METADATA_FILE), encoding="utf-8") as stream:
        return json.load(stream)


def read_index(directory):
    return faiss().read_index(os.path.join(directory, INDEX_FILE))


def corpus_vectors(directory):
    """The exact vectors stored in an index directory, float32 ``(count, dim)``."""
    index = read_index(directory)
    return index.reconstruct_n(0, index.ntotal)


def read_keys(directory, rows=None):
    """``[(file, line)]`` of every vector, in index order; or, given a set of ``rows``, only
    ``{row: (file, line)}`` of those (a search needs a few keys of a large index)."""
    keys = {}
    with open(os.path.join(directory, KEYS_FILE), encoding="utf-8") as stream:
        for row, line in enumerate(stream):
            if rows is not None and row not in rows:
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2 or not fields[1].isdigit():
                raise DataError("%s:%d: expected file<TAB>line, got %r"
                                % (os.path.join(directory, KEYS_FILE), row + 1, line[:200]))
            keys[row] = (fields[0], int(fields[1]))
    return list(keys.values()) if rows is None else keys


def key_texts(keys):
    """``{(file, line): text}`` for the wanted keys, read from the files they name (one pass
    per file); a file that is gone or shorter is logged and its keys left out."""
    wanted = {}
    for path, line in keys:
        wanted.setdefault(path, set()).add(line)
    texts = {}
    for path, lines in wanted.items():
        if path.endswith(".npy"):
            continue  # vectors indexed with --from-vectors alone: no text to show
        try:
            for number, text in enumerate(read_sentences(path, "lines"), 1):
                if number in lines:
                    texts[(path, number)] = text
        except DataError as error:
            logger.warning("%s: cannot show the matched lines", error)
    return texts


def npy_chunks(path, rows=65536):
    """``(first_row, vectors)`` blocks of a ``.npy`` matrix, memory-mapped, so any size streams."""
    try:
        matrix = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as error:
        raise DataError("%s: not a readable .npy array (%s)" % (path, error)) from None
    if matrix.ndim != 2:
        raise DataError("%s: expected a 2-d array of vectors, got shape %s" % (path, matrix.shape))
    for start in range(0, len(matrix), rows):
        yield start, np.asarray(matrix[start:start + rows], dtype=np.float32)


def line_keys(paths):
    """``(file, line)`` of every line of the sentence files, in order, lazily."""
    for path in paths:
        for number, _ in enumerate(read_sentences(path, "lines"), 1):
            yield os.path.abspath(path), number


def add_keyed_chunks(writer, vectors_chunks, keys):
    """Add ``vectors_chunks`` to ``writer`` with the next keys of the iterator ``keys``; the two
    must have the same length."""
    keys = iter(keys)
    for vectors in vectors_chunks:
        chunk = list(itertools.islice(keys, len(vectors)))
        if len(chunk) != len(vectors):
            raise DataError("fewer keys (lines) than vectors: %d vectors left without a line"
                            % (len(vectors) - len(chunk)))
        writer.add(vectors, chunk)
    extra = next(keys, None)
    if extra is not None:
        raise DataError("%s:%d: more lines than vectors" % extra)

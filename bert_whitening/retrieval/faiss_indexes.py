"""FAISS indexes and their timings: what ``eval-retrieval`` reports of each setting beside its
quality, and the exact and HNSW indexes an index directory holds.

FAISS (``pip install '.[search]'``) is imported on first use, so the rest of the package does not
need it.
"""

import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from bert_whitening.errors import BertWhiteningError
from bert_whitening.retrieval.benchmark import CUTOFF, exact_search, overlap_at_k, retrieval_metrics

#: HNSW build and search parameters (FAISS defaults are M 32, efConstruction 40, efSearch 16).
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 40, 64


def faiss():
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its per-CPU-variant notes
    try:
        import faiss as module
    except ImportError:
        raise BertWhiteningError("retrieval needs FAISS: pip install 'bert-whitening[search]' (faiss-cpu)") from None
    return module


def flat_index(vectors: np.ndarray):
    """A FAISS ``IndexFlatIP`` (exact inner product) holding ``vectors``."""
    index = faiss().IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def hnsw_index(dim: int, m: int = HNSW_M):
    """An empty FAISS HNSW index on inner product, with this module's build/search parameters."""
    index = faiss().IndexHNSWFlat(dim, m, faiss().METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def index_bytes(index) -> int:
    """Size of the serialised index: what it takes on disk, and about what it takes in memory."""
    return int(faiss().serialize_index(index).nbytes)


@contextlib.contextmanager
def one_thread():
    """FAISS on one OpenMP thread inside the block. A lone query is not worth splitting, and on a
    busy machine the other threads' OpenMP waiting dominates a lone query's latency (see
    docs/performance.md); batches keep all threads."""
    before = faiss().omp_get_max_threads()
    faiss().omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss().omp_set_num_threads(before)


def latencies(
    search: Callable[[np.ndarray], object],
    queries: np.ndarray,
    singles: int = 200,
    batch: int = 64,
    minimum_batched: int = 1024,
) -> dict[str, float]:
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
            search(queries[row : row + 1])
            times.append(time.perf_counter() - started)
    batched = queries if len(queries) >= minimum_batched else np.resize(queries, (minimum_batched, queries.shape[1]))
    started = time.perf_counter()
    for start in range(0, len(batched), batch):
        search(batched[start : start + batch])
    elapsed = time.perf_counter() - started
    return {
        "p50_ms": float(np.percentile(times, 50) * 1e3),
        "p99_ms": float(np.percentile(times, 99) * 1e3),
        "qps_batch%d" % batch: float(len(batched) / elapsed),
    }


def score_setting(queries: np.ndarray, corpus: np.ndarray, relevant: Sequence[set[int]], hnsw_m: int = HNSW_M) -> dict:
    """Everything eval-retrieval reports for one setting's query and corpus vectors: exact
    metrics, FAISS flat index size and latencies, and HNSW recall against exact search."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    corpus = np.ascontiguousarray(corpus, dtype=np.float32)
    ids, _ = exact_search(queries, corpus)
    result = retrieval_metrics(ids, relevant)
    result.update(queries=len(queries), corpus=len(corpus), dim=corpus.shape[1])
    flat = flat_index(corpus)
    result["flat"] = {"index_bytes": index_bytes(flat), **latencies(lambda q: flat.search(q, CUTOFF), queries)}
    hnsw = hnsw_index(corpus.shape[1], hnsw_m)
    hnsw.add(corpus)
    _, approximate = hnsw.search(queries, CUTOFF)
    result["hnsw"] = {
        "m": hnsw_m,
        "ef_search": HNSW_EF_SEARCH,
        "index_bytes": index_bytes(hnsw),
        "recall@10_vs_exact": overlap_at_k(approximate, ids),
        **latencies(lambda q: hnsw.search(q, CUTOFF), queries),
    }
    return result

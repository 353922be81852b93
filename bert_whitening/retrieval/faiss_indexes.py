"""FAISS indexes and their timings: what ``eval-retrieval`` reports of each setting beside its
quality, and the exact, HNSW and code indexes an index directory holds.

FAISS (``pip install '.[search]'``) is imported on first use, so the rest of the package does not
need it.
"""

import contextlib
import logging
import re
import struct
import time
from collections.abc import Callable, Sequence

import numpy as np

from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.retrieval.benchmark import (
    CUTOFF,
    exact_search,
    recall_against_exact,
    result_cosines,
    retrieval_metrics,
)

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


#: The neighbours per node an HNSW index may have: FAISS crashes the process adding to a graph of
#: M 1, and allocates without bound for a negative M.
HNSW_M_RANGE = range(2, 513)


def check_hnsw_m(m, allow_flat=False):
    """Refuse an HNSW ``m`` outside `HNSW_M_RANGE` (0 too, when ``allow_flat``: an exact index)."""
    if allow_flat and type(m) is int and m == 0:
        return
    if type(m) is not int or m not in HNSW_M_RANGE:
        raise BertWhiteningError(
            "hnsw_m must be %san integer %d..%d, got %r"
            % ("0 (exact) or " if allow_flat else "", HNSW_M_RANGE[0], HNSW_M_RANGE[-1], m)
        )


def hnsw_index(dim: int, m: int = HNSW_M):
    """An empty FAISS HNSW index on inner product, with this module's build/search parameters."""
    check_hnsw_m(m)
    index = faiss().IndexHNSWFlat(dim, m, faiss().METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


#: What ``faiss.write_index`` writes before every index (``write_index_header``): four characters
#: naming its kind, the dimension, the row count, two unused words, whether it is trained, the
#: metric; then the arrays of its kind, each after its length (``_LENGTH``).
_HEADER, _LENGTH = struct.Struct("<4siqqq?i"), struct.Struct("<Q")
#: The kinds of index an index directory holds (its ``index.json``'s ``index``), and the four
#: characters FAISS writes them with: ``IndexFlatIP``, ``IndexHNSWFlat`` (whose vectors follow
#: its graph as an ``IndexFlatIP``).
FOURCC = {"flat": b"IxFI", "hnsw": b"IHNf"}
#: The arrays of an HNSW graph, in file order: name, bytes per entry, and the entries it must
#: hold for ``count`` vectors (None: any that the file holds).
_HNSW_ARRAYS = (
    ("level probabilities", 8, None),
    ("neighbours per level", 4, None),
    ("levels", 4, lambda count: count),
    ("offsets", 8, lambda count: count + 1),
    ("neighbours", 4, None),
)
#: The graph's numbers after its arrays: entry point, top level, efConstruction, efSearch, unused.
_HNSW_SCALARS = struct.Struct("<iiiii")
#: ``faiss.METRIC_INNER_PRODUCT`` (FAISS need not be imported to check a file).
_METRIC_INNER_PRODUCT = 0


#: The four characters FAISS writes an index of codes with (an index directory's ``codes``): a
#: binary flat index (Hamming distances of packed bits) and a scalar quantizer of int8 codes.
CODE_FOURCC = {"binary": b"IBxF", "int8": b"IxSQ"}
#: ``write_index_binary_header``: four characters, bits a code, bytes a code, row count, whether
#: it is trained, the metric (unused by a binary flat index).
_BINARY_HEADER = struct.Struct("<4siiq?i")
#: A scalar quantizer after the index header: its kind, range statistic and its argument, the
#: dimension, bytes a code; then its trained values (none for int8 codes taken as they are).
_SCALAR_QUANTIZER = struct.Struct("<iifQQ")
#: ``faiss.ScalarQuantizer.QT_8bit_direct_signed``: int8 codes stored as they are (``code + 128``).
QT_8BIT_DIRECT_SIGNED = 8


def code_index(quantizer):
    """An empty FAISS index searching the codes of ``quantizer`` (a `bert_whitening.codes.Quantizer`,
    binary or int8): binary codes by Hamming distance in an ``IndexBinaryFlat`` (the padding bits
    of the last byte are 0 in every code), int8 codes by inner product in an
    ``IndexScalarQuantizer`` that holds them as they are, a byte a dimension."""
    if quantizer.codes == "binary":
        return faiss().IndexBinaryFlat(8 * quantizer.width)
    if quantizer.codes != "int8":
        raise BertWhiteningError("an index of codes holds binary or int8 codes, not %s" % quantizer.codes)
    return faiss().IndexScalarQuantizer(quantizer.k, QT_8BIT_DIRECT_SIGNED, faiss().METRIC_INNER_PRODUCT)


def add_codes(index, quantizer, unit_vectors):
    """Add the codes of ``unit_vectors`` (`Quantizer.encode`) to ``index`` (`code_index`)."""
    codes = quantizer.encode(unit_vectors)
    index.add(codes if quantizer.codes == "binary" else codes.astype(np.float32))


def candidates(index, quantizer, queries, count):
    """The ids ``(n, count)`` of the ``count`` rows of ``index`` (`code_index`) nearest each
    float query: by Hamming distance to the query's binary code; for int8, by the inner
    product of the query, scaled by the steps, with the stored integers (each code's own norm,
    about 1, left out: the candidates are rescored)."""
    queries = np.asarray(queries, dtype=np.float32)
    if quantizer.codes == "binary":
        return index.search(quantizer.encode(queries), count)[1]
    return index.search(np.ascontiguousarray(queries * quantizer.steps, dtype=np.float32), count)[1]


def check_index_layout(read_at, size: int, kind: str, count: int, dim: int, codes: str = "float32") -> list:
    """Refuse a FAISS file of ``size`` bytes (``read_at(offset, length)`` reads it) unless it is
    laid out as the ``kind`` index (``"flat"`` or ``"hnsw"``) of ``count`` float32 vectors of
    ``dim`` (all three as an index directory's ``index.json`` records them) that
    ``faiss.write_index`` writes of `flat_index` and `hnsw_index`, reading its headers and array
    lengths alone. FAISS allocates what each length in the file claims before it reads the bytes,
    so a small crafted file could make it allocate gigabytes: after this check, every array lies
    within the file and the vectors are exactly ``count`` x ``dim`` x 4 bytes, so what FAISS
    allocates is bounded by the file's size; an HNSW graph's efSearch, which sizes what every
    search allocates, must be the one `hnsw_index` sets; with ``codes`` binary or int8, it must be
    the `code_index` of ``count`` such codes, every code's bytes there. A `DataError` says what is
    wrong, for the caller to name the file. Returns the ``(offset, bytes)`` of every header and length it checked, for
    `read_as_checked`."""
    layout = _Layout(read_at, size)
    if codes != "float32":
        layout.codes(codes, count, dim)
    elif kind == "hnsw":
        layout.header(FOURCC["hnsw"], count, dim)
        for name, itemsize, entries in _HNSW_ARRAYS:
            layout.array(name, itemsize, entries and entries(count))
        _, _, construction, search, _ = layout.take(_HNSW_SCALARS)
        if (construction, search) != (HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH):  # efSearch sizes each search's lists
            raise DataError(
                "holds an HNSW graph of efConstruction %d and efSearch %d, where `index` writes %d and %d"
                % (construction, search, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH)
            )
    if codes == "float32":
        layout.header(FOURCC["flat"], count, dim)
        layout.array("vector components", 4, count * dim)
    if layout.offset != size:
        raise DataError("has %d bytes after the index it holds" % (size - layout.offset))
    return layout.checked


def read_as_checked(read, checked):
    """``read`` (of a stream from the file's first byte, for FAISS's reader) refusing, before
    FAISS sees them, headers and lengths that are not the bytes `check_index_layout` checked
    (its ``checked``): a file written over in place between that check and FAISS's read would
    otherwise have FAISS allocate what the new lengths claim. The rest of the file is refused
    once read if it changed (its sha256)."""
    position = 0

    def guarded(size):
        nonlocal position
        data = read(size)
        start, position = position, position + len(data)
        for offset, expected in checked:
            for byte in range(max(offset, start), min(offset + len(expected), position)):
                if data[byte - start] != expected[byte - offset]:
                    raise DataError(
                        "changed at byte %d after it was checked: the directory is being written over; "
                        "use it once that is done" % byte
                    )
        return data

    return guarded


class _Layout:
    """A walk through a FAISS file's headers and array lengths from its first byte, checking each
    against what the file must be and the bytes it has left."""

    def __init__(self, read_at, size):
        self.read_at, self.size, self.offset = read_at, size, 0
        self.checked = []  # (offset, bytes) of each header and length read

    def take(self, fields):
        data = self.read_at(self.offset, fields.size)
        if len(data) != fields.size:
            raise DataError("ends at byte %d, before the index it should hold" % (self.offset + len(data)))
        self.checked.append((self.offset, data))
        self.offset += fields.size
        return fields.unpack(data)

    def header(self, fourcc, count, dim):
        found, found_dim, found_count, _, _, _, metric = self.take(_HEADER)
        if found != fourcc:
            raise DataError("holds a FAISS index of kind %r where %r is expected" % (found, fourcc))
        if (found_count, found_dim) != (count, dim):
            raise DataError(
                "holds %d vectors of dimension %d; index.json says %d of %d" % (found_count, found_dim, count, dim)
            )
        if metric != _METRIC_INNER_PRODUCT:
            raise DataError("holds an index of FAISS metric %d, not inner product" % metric)

    def codes(self, codes, count, dim):
        """A `code_index` of ``count`` ``codes`` of ``dim`` dimensions and its codes."""
        width = (dim + 7) // 8 if codes == "binary" else dim
        if codes == "binary":
            found, bits, code_size, found_count, _, _ = self.take(_BINARY_HEADER)
            if found != CODE_FOURCC["binary"]:
                raise DataError("holds a FAISS index of kind %r where %r is expected" % (found, CODE_FOURCC["binary"]))
            if (found_count, bits, code_size) != (count, 8 * width, width):
                raise DataError(
                    "holds %d binary codes of %d bytes; index.json says %d of %d dimensions"
                    % (found_count, code_size, count, dim)
                )
        else:
            self.header(CODE_FOURCC["int8"], count, dim)
            kind, _, _, found_dim, code_size = self.take(_SCALAR_QUANTIZER)
            if (kind, found_dim, code_size) != (QT_8BIT_DIRECT_SIGNED, dim, dim):
                raise DataError(
                    "holds a scalar quantizer of kind %d, %d dimensions in %d bytes, not int8 codes of %d"
                    % (kind, found_dim, code_size, dim)
                )
            self.array("trained values", 4, 0)
        self.array("code bytes", 1, count * width)

    def array(self, name, itemsize, entries=None):
        (length,) = self.take(_LENGTH)
        if entries is not None and length != entries:
            raise DataError("holds %d %s where %d are expected" % (length, name, entries))
        if length * itemsize > self.size - self.offset:
            raise DataError(
                "claims %d %s (%d bytes) with %d bytes left in the file: damaged or crafted"
                % (length, name, length * itemsize, self.size - self.offset)
            )
        self.offset += length * itemsize


def faiss_reason(error: RuntimeError) -> str:
    """What a FAISS error says is wrong, without the C++ function and source line it names
    (``Error in <signature> at <file>:<line>: [Error: '<condition>' failed: ]<reason>``)."""
    text = str(error).splitlines()[0]
    return re.split(r"' failed: |\.cpp:\d+: ", text)[-1]


def check_graph_m(index, m: int):
    """Refuse an HNSW ``index`` FAISS has read whose graph has another M than ``m``, the index
    directory's ``hnsw_m`` (FAISS itself refuses, as it reads a graph, neighbour ids, offsets,
    levels and an entry point out of range). A `DataError` says what is wrong, for the caller to
    name the file."""
    per_level = faiss().vector_to_array(index.hnsw.cum_nneighbor_per_level)
    built = [0] + [2 * m + m * level for level in range(len(per_level) - 1)]
    if per_level.tolist() != built:
        raise DataError(
            "holds an HNSW graph of %s neighbours on its levels, not those of M %d (index.json's hnsw_m)"
            % ("/".join(map(str, np.diff(per_level)[:3])), m)
        )


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


#: How `latencies` times a search: one-query calls on the first `SINGLE_QUERIES` queries, and
#: calls of `BATCH_QUERIES` over at least `BATCHED_QUERIES` (the queries repeated, so that a
#: small set is still timed over many calls), reported as `QPS_BATCH`.
SINGLE_QUERIES, BATCH_QUERIES, BATCHED_QUERIES = 200, 64, 1024
QPS_BATCH = "qps_batch%d" % BATCH_QUERIES


def latencies(search: Callable[[np.ndarray], object], queries: np.ndarray) -> dict[str, float]:
    """``{"p50_ms", "p99_ms"}`` of one-query calls of ``search(array)`` (FAISS on one thread),
    and `QPS_BATCH`: queries per second in calls of `BATCH_QUERIES`."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    search(queries[:1])  # warm-up
    times = []
    with one_thread():
        for row in range(min(SINGLE_QUERIES, len(queries))):
            started = time.perf_counter()
            search(queries[row : row + 1])
            times.append(time.perf_counter() - started)
    batched = queries if len(queries) >= BATCHED_QUERIES else np.resize(queries, (BATCHED_QUERIES, queries.shape[1]))
    started = time.perf_counter()
    for start in range(0, len(batched), BATCH_QUERIES):
        search(batched[start : start + BATCH_QUERIES])
    elapsed = time.perf_counter() - started
    return {
        "p50_ms": float(np.percentile(times, 50) * 1e3),
        "p99_ms": float(np.percentile(times, 99) * 1e3),
        QPS_BATCH: float(len(batched) / elapsed),
    }


def score_setting(queries: np.ndarray, corpus: np.ndarray, relevant: Sequence[set[int]], hnsw_m: int = HNSW_M) -> dict:
    """Everything eval-retrieval reports for one setting's query and corpus vectors: exact
    metrics, FAISS flat index size and latencies, and HNSW recall against exact search (ties
    counted: `recall_against_exact`)."""
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
        "recall@10_vs_exact": recall_against_exact(
            result_cosines(queries, corpus, approximate), result_cosines(queries, corpus, ids)
        ),
        **latencies(lambda q: hnsw.search(q, CUTOFF), queries),
    }
    return result

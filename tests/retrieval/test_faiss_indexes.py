"""FAISS flat and HNSW indexes against numpy brute force: results, sizes, threads and timings."""

import re

import numpy as np
import pytest

from bert_whitening.errors import BertWhiteningError
from bert_whitening.retrieval import benchmark, faiss_indexes

from helpers import unit
from reference import reference_metrics, reference_ranking


def test_faiss_flat_index_equals_numpy_brute_force():
    rng = np.random.default_rng(0)
    corpus = unit(rng.normal(size=(2000, 64))).astype(np.float32)
    queries = unit(rng.normal(size=(100, 64))).astype(np.float32)
    scores, ids = faiss_indexes.flat_index(corpus).search(queries, 10)
    dots = queries.astype(np.float64) @ corpus.T.astype(np.float64)
    expected = np.argsort(-dots, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(dots, expected, axis=1), atol=1e-5)


def test_hnsw_overlap_with_exact_search():
    assert benchmark.overlap_at_k([[1, 2, 3, 4]], [[4, 3, 9, 8]]) == 0.5
    rng = np.random.default_rng(1)
    corpus = unit(rng.normal(size=(3000, 32))).astype(np.float32)
    queries = unit(rng.normal(size=(50, 32))).astype(np.float32)
    exact, _ = benchmark.exact_search(queries, corpus)
    index = faiss_indexes.hnsw_index(32)
    index.add(corpus)
    _, approximate = index.search(queries, 10)
    assert 0.8 <= benchmark.overlap_at_k(approximate, exact) <= 1.0


def test_score_setting_reports_every_figure():
    rng = np.random.default_rng(2)
    corpus = unit(rng.normal(size=(300, 16)))
    queries = unit(corpus[:20] + rng.normal(scale=0.1, size=(20, 16)))
    result = faiss_indexes.score_setting(queries, corpus, [{i} for i in range(20)], hnsw_m=8)
    assert result["queries"] == 20 and result["corpus"] == 300 and result["dim"] == 16
    assert result["recall@10"] == 1.0
    assert result["flat"]["index_bytes"] >= 300 * 16 * 4
    assert result["flat"]["p99_ms"] >= result["flat"]["p50_ms"] > 0
    assert result["flat"]["qps_batch64"] > 0 and 0 < result["hnsw"]["recall@10_vs_exact"] <= 1


def test_score_setting_on_a_corpus_smaller_than_ten_with_the_m_asked_for():
    """FAISS pads its ten ids with -1 past a corpus of five: every exact id found is a recall of
    1. The HNSW graph is one of the M asked for: as large as FAISS's own of that M."""
    import faiss

    rng = np.random.default_rng(6)
    corpus = unit(rng.normal(size=(5, 8))).astype(np.float32)
    queries = unit(corpus + rng.normal(scale=0.1, size=(5, 8))).astype(np.float32)
    result = faiss_indexes.score_setting(queries, corpus, [{i} for i in range(5)], hnsw_m=4)
    assert result["hnsw"]["recall@10_vs_exact"] == 1.0 and result["hnsw"]["m"] == 4
    reference = faiss.IndexHNSWFlat(8, 4, faiss.METRIC_INNER_PRODUCT)
    reference.add(corpus)
    assert result["hnsw"]["index_bytes"] == faiss.serialize_index(reference).nbytes
    expected = reference_metrics(
        reference_ranking(queries.astype(np.float64), corpus.astype(np.float64)), [{i} for i in range(5)]
    )
    assert {metric: result[metric] for metric in expected} == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("m", [0, 2, 512])
def test_hnsw_m_from_2_to_512_and_0_for_an_exact_index_are_taken(m):
    faiss_indexes.check_hnsw_m(m, allow_flat=True)
    if m:
        faiss_indexes.check_hnsw_m(m)


@pytest.mark.parametrize("m", [1, 513, -1, 8.0, True, False, "8", None])
@pytest.mark.parametrize("allow_flat", [False, True])
def test_hnsw_m_outside_2_512_or_not_an_int_is_refused(m, allow_flat):
    said = "hnsw_m must be %san integer 2..512, got %r" % ("0 (exact) or " if allow_flat else "", m)
    with pytest.raises(BertWhiteningError, match="^%s$" % re.escape(said)):
        faiss_indexes.check_hnsw_m(m, allow_flat=allow_flat)


def test_an_hnsw_index_of_m_0_is_refused():
    with pytest.raises(BertWhiteningError, match=r"^hnsw_m must be an integer 2\.\.512, got 0$"):
        faiss_indexes.check_hnsw_m(0)


@pytest.mark.parametrize(
    "message, reason",
    [
        (
            "Error in void faiss::read_index(IOReader*) at /project/faiss/faiss/impl/index_read.cpp:1038: "
            "Error: 'ret == (1)' failed: read error in index.faiss: 0 != 1 (Success)\nmore",
            "read error in index.faiss: 0 != 1 (Success)",
        ),
        (
            "Error in faiss::Index* faiss::read_index() at /x/index_read.cpp:12: Index type 0x1 not recognized",
            "Index type 0x1 not recognized",
        ),
    ],
)
def test_a_faiss_error_is_said_without_its_function_and_source_line(message, reason):
    assert faiss_indexes.faiss_reason(RuntimeError(message)) == reason


def test_one_thread_gives_the_threads_back(faiss_threads):
    faiss_threads.omp_set_num_threads(2)
    with faiss_indexes.one_thread():
        assert faiss_threads.omp_get_max_threads() == 1
    assert faiss_threads.omp_get_max_threads() == 2


@pytest.fixture
def faiss_threads():
    """FAISS, its thread count put back after the test."""
    import faiss

    before = faiss.omp_get_max_threads()
    yield faiss
    faiss.omp_set_num_threads(before)


def test_latencies_time_single_queries_on_one_thread_and_batches_of_64_on_all(monkeypatch, faiss_threads):
    """On a clock that a call moves by its query's first component in ms (one query) or 2 ms (a
    batch): five queries of 1, 2, 3, 4 and 10 ms give p50 3 ms (their median, not their mean 4)
    and p99 9.76 ms (linear between the 4th and 5th), and 1024 queries (the five repeated) in
    16 calls of 64, 32 ms: 32,000 queries/s."""
    faiss_threads.omp_set_num_threads(2)
    clock, calls = [0.0], []

    def search(queries):
        calls.append((len(queries), queries[:, 0].tolist(), faiss_threads.omp_get_max_threads()))
        clock[0] += queries[0, 0] / 1e3 if len(queries) == 1 else 2e-3

    monkeypatch.setattr(faiss_indexes.time, "perf_counter", lambda: clock[0])
    queries = np.array([[1.0, 0], [2, 0], [3, 0], [4, 0], [10, 0]])
    got = faiss_indexes.latencies(search, queries)
    assert got == pytest.approx({"p50_ms": 3.0, "p99_ms": 9.76, "qps_batch64": 32000.0})
    assert calls[:6] == [(1, [1.0], 2)] + [(1, [float(i)], 1) for i in (1, 2, 3, 4, 10)]  # a warm-up, then each query
    assert [(rows, threads) for rows, _, threads in calls[6:]] == [(64, 2)] * 16
    assert [value for _, values, _ in calls[6:] for value in values] == [1.0, 2, 3, 4, 10] * 204 + [1.0, 2, 3, 4]


def serialized(index, binary):
    return bytes(
        faiss_indexes.faiss().serialize_index_binary(index) if binary else faiss_indexes.faiss().serialize_index(index)
    )


@pytest.mark.parametrize("codes", ["binary", "int8"])
def test_an_index_of_codes_has_the_layout_its_check_takes(codes):
    from bert_whitening.codes import quantizer

    coder = quantizer(codes, 20, np.ones(20))
    index = faiss_indexes.code_index(coder)
    faiss_indexes.add_codes(index, coder, unit(np.random.default_rng(0).normal(size=(9, 20))))
    data = serialized(index, codes == "binary")
    read_at = lambda offset, length: data[offset : offset + length]  # noqa: E731
    faiss_indexes.check_index_layout(read_at, len(data), "flat", 9, 20, codes)
    for count, dim, fragment in ((10, 20, "index.json says 10"), (9, 28 if codes == "binary" else 21, "")):
        with pytest.raises(ValueError, match=fragment):
            faiss_indexes.check_index_layout(read_at, len(data), "flat", count, dim, codes)
    with pytest.raises(ValueError, match="has 1 bytes after the index"):
        faiss_indexes.check_index_layout(lambda o, n: (data + b"\0")[o : o + n], len(data) + 1, "flat", 9, 20, codes)
    length = len(data) - 9 * coder.width - 8  # where the codes' length is written, before them
    short = data[:length] + (9 * coder.width - 1).to_bytes(8, "little") + data[length + 9 :]
    with pytest.raises(
        ValueError, match="holds %d code bytes where %d are expected" % (9 * coder.width - 1, 9 * coder.width)
    ):
        faiss_indexes.check_index_layout(lambda o, n: short[o : o + n], len(short), "flat", 9, 20, codes)
    other = {"binary": "int8", "int8": "binary"}[codes]
    with pytest.raises(ValueError, match="holds a FAISS index of kind"):
        faiss_indexes.check_index_layout(read_at, len(data), "flat", 9, 20, other)

"""The retrieval benchmark, its metrics and index directories, against plain re-implementations."""

import os
import re

import numpy as np
import pytest

from bert_whitening.data import DataError
from bert_whitening.errors import BertWhiteningError
from bert_whitening.retrieval import benchmark, faiss_indexes
from bert_whitening.retrieval.index_directory import (
    INDEX_FILE,
    KEYS_FILE,
    RECORD_FILE,
    TEXTS_FILE,
    IndexDirectory,
    IndexWriter,
)
from bert_whitening.retrieval.search import _add_keyed, numbered_lines


def reference_ranking(queries, corpus):
    """Every corpus position per query, by descending dot product then ascending position."""
    scores = [[float(np.dot(q, c)) for c in corpus] for q in queries]
    return [sorted(range(len(corpus)), key=lambda j: (-row[j], j)) for row in scores]


def reference_metrics(rankings, relevant):
    """MRR@10, Recall@1 and Recall@10 written out from their definitions, one query at a time."""
    reciprocal, at_1, at_10 = [], [], []
    for ranking, wanted in zip(rankings, relevant, strict=True):
        rank = next((position + 1 for position, item in enumerate(ranking[:10]) if item in wanted), None)
        reciprocal.append(1.0 / rank if rank else 0.0)
        at_1.append(ranking[0] in wanted)
        at_10.append(any(item in wanted for item in ranking[:10]))
    return {
        "mrr@10": sum(reciprocal) / len(reciprocal),
        "recall@1": sum(at_1) / len(at_1),
        "recall@10": sum(at_10) / len(at_10),
    }


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_benchmark_follows_the_definition_on_binary_labels():
    pairs = [
        ("q1", "a", 1),
        ("q2", "b", 0),
        ("q1", "c", 1),
        ("q3", "a", 1),
        ("q2", "c", 0),
        ("q1", "a", 1),
        ("q4", "d", 0),
    ]
    bench = benchmark.build_benchmark(pairs, distractors=["x", "a", "x", "y"])
    assert bench.queries == ["q1", "q3"]  # q2 and q4 have no positive pair
    assert bench.corpus == ["a", "b", "c", "d", "x", "y"]  # distinct; distractors not repeated
    assert bench.relevant == [{0, 2}, {0}]
    assert list(bench.query_pairs) == [0, 3]
    assert [pairs[row][1] for row in bench.corpus_pairs] == ["a", "b", "c", "d"]
    assert bench.distractors == ["x", "y"]


def test_relevant_items_are_corpus_positions_not_pair_rows():
    """A second sentence repeated before a new one: the new one's position is 1, its row 2."""
    pairs = [("q1", "a", 1), ("q2", "a", 1), ("q1", "b", 1), ("q3", "c", 0), ("q2", "c", 1)]
    bench = benchmark.build_benchmark(pairs)
    corpus = list(dict.fromkeys(second for _, second, _ in pairs))
    expected = [{corpus.index(b) for a, b, label in pairs if a == query and label == 1} for query in bench.queries]
    assert bench.corpus == ["a", "b", "c"] and bench.relevant == expected == [{0, 1}, {0, 2}]


def test_sts_scores_count_from_4_and_other_scales_are_refused():
    pairs = [("q1", "a", 3.99), ("q1", "b", 4.0), ("q2", "c", 5.0), ("q3", "d", 1.0)]
    bench = benchmark.build_benchmark(pairs)
    assert bench.queries == ["q1", "q2"] and bench.relevant == [{1}, {2}]
    with pytest.raises(DataError, match=r"STS-B\.test: pair 2's label is 7: labels are neither"):
        benchmark.build_benchmark([("q", "a", 1), ("q", "b", 7)], where="STS-B.test")


@pytest.mark.parametrize("label", [5.5, -0.5])
def test_labels_just_outside_the_0_5_scale_are_refused(label):
    """The scale is 0-5 inclusive: a 5.5 or a -0.5 among scores is neither scale."""
    pairs = [("q1", "a", 4.5), ("q2", "b", 2.0), ("q3", "c", label)]
    with pytest.raises(DataError, match=r"^pairs: pair 3's label is %g: labels are neither" % label):
        benchmark.build_benchmark(pairs)


def test_scores_of_0_and_5_are_on_the_scale():
    pairs = [("q1", "a", 0.0), ("q2", "b", 5.0), ("q3", "c", 2.5)]
    assert benchmark.positive_labels([label for _, _, label in pairs]).tolist() == [False, True, False]
    assert benchmark.build_benchmark(pairs).queries == ["q2"]


def test_a_split_of_mostly_0_1_labels_is_refused_from_nine_in_ten_naming_the_first_stray():
    """9 of 10 labels 0 or 1 is `MOSTLY_BINARY` (0.9) exactly: refused, naming pair 4 (the first
    of the labels on neither side); 8 of 10 are read as 0-5 scores."""
    labels = [0, 1, 1, 3.5, 0, 1, 0, 1, 0, 1]
    with pytest.raises(DataError, match=r"^l: pair 4's label is 3\.5, where 9 of the 10 labels are 0 or 1"):
        benchmark.positive_labels(labels, "l")
    labels[-1] = 4.5
    assert benchmark.positive_labels(labels).tolist() == [False] * 9 + [True]
    labels = [1, 0] * 10
    labels[2], labels[16] = 2.5, 3.0  # two strays, 18 of 20: the first is named
    with pytest.raises(DataError, match=r"^l: pair 3's label is 2\.5, where 18 of the 20"):
        benchmark.positive_labels(labels, "l")


def test_metrics_on_a_hand_made_corpus_with_ties_and_several_relevant_items():
    corpus = unit(
        [[1, 0, 0], [1, 0, 0], [0.8, 0.6, 0], [0, 1, 0], [0, 0, 1], [0.6, 0, 0.8]]
        + [[0.1 * i, 1, 0.3] for i in range(8)]
    )
    queries = unit([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]])
    # Query 0 ties items 0 and 1 at the top; only item 1 is relevant, so rank 2 (ties by position).
    relevant = [{1}, {3, 5}, {2}, {4, 13}]
    ids, scores = benchmark.exact_search(queries, corpus)
    rankings = reference_ranking(queries, corpus)
    np.testing.assert_array_equal(ids, [ranking[:10] for ranking in rankings])
    assert ids[0, 0] == 0 and ids[0, 1] == 1 and scores[0, 0] == scores[0, 1]
    got = benchmark.retrieval_metrics(ids, relevant)
    expected = reference_metrics(rankings, relevant)
    assert got == pytest.approx(expected, abs=1e-12)
    # By hand: query 0 finds item 1 at rank 2 (after its tie), query 1 item 3 first, query 2
    # misses item 2 in its top 10, query 3 finds item 13 first.
    assert expected == {"mrr@10": (0.5 + 1 + 0 + 1) / 4, "recall@1": 2 / 4, "recall@10": 3 / 4}


def test_metrics_match_the_reference_on_random_rankings_with_duplicated_items():
    rng = np.random.default_rng(3)
    base = unit(rng.normal(size=(40, 8)))
    corpus = np.concatenate([base, base[:10]])  # exact duplicates: ties everywhere
    queries = unit(base[rng.integers(0, 40, 30)] + rng.normal(scale=0.5, size=(30, 8)))
    relevant = [set(rng.choice(50, size=rng.integers(1, 4), replace=False).tolist()) for _ in range(30)]
    ids, _ = benchmark.exact_search(queries, corpus)
    rankings = reference_ranking(queries, corpus)
    np.testing.assert_array_equal(ids, [ranking[:10] for ranking in rankings])
    assert benchmark.retrieval_metrics(ids, relevant) == pytest.approx(reference_metrics(rankings, relevant), abs=1e-12)


def test_a_corpus_smaller_than_ten_is_ranked_whole():
    corpus, queries = unit([[1, 0], [0, 1], [1, 1]]), unit([[1, 0.1]])
    ids, _ = benchmark.exact_search(queries, corpus)
    assert ids.tolist() == [[0, 2, 1]]
    assert benchmark.retrieval_metrics(ids, [{1}]) == pytest.approx({"mrr@10": 1 / 3, "recall@1": 0, "recall@10": 1})


def test_exact_search_in_several_query_blocks_equals_one_block(monkeypatch):
    """Blocks of 4 queries over 11: every block's rows land at their own queries, and the last,
    short block is searched whole. Scores are the float64 dot products, not rounded to float32."""
    rng = np.random.default_rng(5)
    corpus, queries = unit(rng.normal(size=(30, 6))), unit(rng.normal(size=(11, 6)))
    monkeypatch.setattr(benchmark, "SEARCH_BLOCK", 4)
    ids, scores = benchmark.exact_search(queries, corpus)
    rankings = reference_ranking(queries, corpus)
    np.testing.assert_array_equal(ids, [ranking[:10] for ranking in rankings])
    assert scores.dtype == np.float64
    expected = [
        [float(np.dot(q, corpus[j])) for j in ranking[:10]] for q, ranking in zip(queries, rankings, strict=True)
    ]
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-15)


def test_metrics_look_at_the_first_ten_of_a_longer_ranking():
    """A relevant item ranked 11th is not found (MRR@10 and Recall@10 0); one ranked 2nd is."""
    ids = np.array([list(range(12)), [5, 3] + list(range(6, 16))])
    assert benchmark.retrieval_metrics(ids, [{10}, {3}]) == {"mrr@10": 0.25, "recall@1": 0.0, "recall@10": 0.5}


def test_overlap_counts_the_exact_ids_found_where_faiss_pads_with_minus_one():
    """On a corpus of fewer than ten rows exact search returns them all, FAISS as many with -1
    after them: all of them found is an overlap of 1, not of rows / 10."""
    exact = [[2, 0, 1, 4, 3]]
    assert benchmark.overlap_at_k([[0, 1, 2, 3, 4, -1, -1, -1, -1, -1]], exact) == 1.0
    assert benchmark.overlap_at_k([[0, 1, 2, 7, -1, -1, -1, -1, -1, -1]], exact) == 0.6


def test_distractors_are_every_line_of_a_sentence_file_and_both_sentences_of_a_pair_file(tmp_path):
    lines, pairs = tmp_path / "lines.txt", tmp_path / "pairs.txt"
    lines.write_text("one\ntwo\n", encoding="utf-8")
    pairs.write_text("a\tb\t1\nc\td\t0\nno label here\te\n", encoding="utf-8")
    with pytest.raises(DataError, match="pairs.txt:3"):
        list(benchmark.read_distractors([str(lines), str(pairs)]))
    read = list(benchmark.read_distractors([str(lines), str(pairs)], skip_bad_lines=True))
    assert read == ["one", "two", "a", "b", "c", "d"]


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


def test_index_directory_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    vectors = unit(rng.normal(size=(25, 6))).astype(np.float32)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("line %d\n" % i for i in range(25)), encoding="utf-8")
    output = str(tmp_path / "index")
    with IndexWriter(output, RECORD, 6) as writer:
        _add_keyed(writer, [vectors[:10], vectors[10:]], numbered_lines([str(corpus)]))
    assert sorted(os.listdir(output)) == sorted([INDEX_FILE, KEYS_FILE, TEXTS_FILE, RECORD_FILE])
    index = IndexDirectory(output)
    assert {key: index.metadata[key] for key in ("count", "dim", "index", "hnsw_m")} == {
        "count": 25,
        "dim": 6,
        "index": "flat",
        "hnsw_m": None,
    }
    assert index.metadata["pooling"] == RECORD["pooling"]
    np.testing.assert_array_equal(index.vectors(), vectors)
    assert index.rows({12, 0}) == {12: (str(corpus), 13, "line 12"), 0: (str(corpus), 1, "line 0")}
    with pytest.raises(ValueError, match="already exists"):
        IndexWriter(output, RECORD, 6)


#: An encoder record as `EncoderConfig.to_config` writes it (the tests of this file need no model).
RECORD = {
    "model": {
        "name": "m",
        "format": "google",
        "type": "bert",
        "hidden_size": 6,
        "num_hidden_layers": 1,
        "vocab_sha256": "0" * 64,
    },
    "model_dir": None,
    "pooling": "cls",
    "maxlen": 16,
    "lowercase": True,
    "whitening": None,
    "n_components": 0,
    "normalize": True,
    "allow_rank_deficient": False,
}


@pytest.mark.parametrize("problem", ["norm", "nan", "more-lines", "fewer-lines", "dimension"])
def test_a_failed_index_leaves_no_directory(tmp_path, problem):
    vectors = unit(np.ones((4, 3))).astype(np.float32)
    lines = {"more-lines": 5, "fewer-lines": 3}.get(problem, 4)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("s\n" * lines, encoding="utf-8")
    if problem == "norm":
        vectors[2] *= 2
    if problem == "nan":
        vectors[1, 0] = np.nan
    output = tmp_path / "index"
    message = {
        "norm": r"corpus.txt:3: the vector has norm 2 where L2-normalised vectors have 1",
        "nan": r"corpus.txt:2: the vector holds nan \(column 0\)",
        "more-lines": r"corpus.txt:5: more lines",
        "fewer-lines": "fewer lines",
        "dimension": r"corpus.txt: vectors of dimension 3, but the encoder options give 5 \(m, not whitened\)",
    }[problem]
    with pytest.raises(ValueError, match=message):
        with IndexWriter(str(output), RECORD, 5 if problem == "dimension" else 3, source=str(corpus)) as writer:
            _add_keyed(writer, [vectors], numbered_lines([str(corpus)]))
    assert os.listdir(tmp_path) == ["corpus.txt"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"split": 1}, "split must be a str, got int 1"),
        (
            {"distractor_files": "d.txt"},
            "distractor_files must be a list of file paths, got str 'd.txt' (one file: put",
        ),
        ({"distractor_files": [None]}, "distractor_files[0] must be a str, got NoneType None"),
        ({"hnsw_m": 0}, "hnsw_m must be an integer 2..512, got 0"),
        ({"hnsw_m": 16.0}, "hnsw_m must be an integer 2..512, got 16.0"),
    ],
)
def test_retrieval_options_refuse_each_value_no_benchmark_can_use_when_built(options, message):
    from bert_whitening.retrieval.evaluate import RetrievalOptions

    with pytest.raises(BertWhiteningError) as raised:
        RetrievalOptions(**options)
    assert str(raised.value).startswith(message)


def test_evaluate_retrieval_refuses_flows_and_options_of_another_kind(monkeypatch):
    """Before any file is read or model built: a benchmark scores whitenings."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.evaluation import EvalOptions
    from bert_whitening.retrieval import evaluate

    assert evaluate.RetrievalOptions(distractor_files=["d.txt"]).distractor_files == ("d.txt",)
    monkeypatch.setattr(evaluate, "load_tasks", lambda *args: pytest.fail("the tasks were loaded"))
    spec = EncoderConfig("unused")
    refused = [
        (EvalOptions(methods=["whitening", "flow"]), evaluate.RetrievalOptions(), "eval-retrieval scores whitenings"),
        ({"n_components": [0]}, evaluate.RetrievalOptions(), "options must be an EvalOptions, got dict"),
        (EvalOptions(), {"split": "test"}, "retrieval must be a RetrievalOptions, got dict"),
    ]
    for options, retrieval, said in refused:
        with pytest.raises(BertWhiteningError) as raised:
            evaluate.evaluate_retrieval(spec, ["STS-B"], options, retrieval)
        assert str(raised.value).startswith(said)

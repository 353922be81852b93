"""The retrieval benchmark and its metrics against plain re-implementations (tests/reference.py)."""

import numpy as np
import pytest

from bert_whitening.data import DataError
from bert_whitening.retrieval import benchmark

from helpers import unit
from reference import reference_metrics, reference_ranking


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


def test_code_search_ranks_by_hamming_distance_ties_by_position(monkeypatch):
    from bert_whitening.codes import quantizer

    monkeypatch.setattr(benchmark, "SEARCH_BLOCK", 3)  # 7 queries in three blocks
    rng = np.random.default_rng(4)
    queries, corpus = unit(rng.normal(size=(7, 12))), unit(rng.normal(size=(40, 12)))
    ids, scores = benchmark.code_search(quantizer("binary", 12), queries, corpus)
    for query, found, found_scores in zip(queries, ids, scores, strict=True):
        hamming = ((query > 0) != (corpus > 0)).sum(axis=1)  # bits that differ, counted by hand
        expected = sorted(range(len(corpus)), key=lambda row: (hamming[row], row))[:10]
        assert found.tolist() == expected
        np.testing.assert_allclose(found_scores, 1 - 2 * hamming[expected] / 12)


def test_a_result_tying_with_the_exact_last_is_found_though_its_id_differs():
    corpus = np.eye(4, dtype=np.float32)[[0, 1, 2, 2]]  # rows 2 and 3 are the same vector
    queries = np.array([[0.8, 0.0, 0.6, 0.0]], np.float32)
    exact, other, missing = [[0, 2]], [[0, 3]], [[0, -1]]
    cosines = lambda ids: benchmark.result_cosines(queries, corpus, np.array(ids))  # noqa: E731
    np.testing.assert_allclose(cosines(exact), [[0.8, 0.6]])
    assert cosines(missing)[0, 1] == -np.inf  # FAISS' -1 is no row, not the last one
    assert benchmark.recall_against_exact(cosines(other), cosines(exact)) == 1.0
    assert benchmark.overlap_at_k(other, exact) == 0.5
    assert benchmark.recall_against_exact(cosines(missing), cosines(exact)) == 0.5
    near = cosines(exact) - [[0.0, 2 * benchmark.TIE]]  # nearer than the last, but no tie
    assert benchmark.recall_against_exact(near, cosines(exact)) == 0.5
    assert benchmark.recall_against_exact(cosines(exact) - [[0.0, benchmark.TIE / 2]], cosines(exact)) == 1.0

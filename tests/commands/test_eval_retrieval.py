"""`eval-retrieval` on the tiny checkpoint, against the definitions re-done here."""

import functools
import json
import logging

import pytest

from bert_whitening import encoding
from bert_whitening.encoding import encode
from bert_whitening.vectors import l2_normalize
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import MANY, limit_memory_in, one_error, run
from reference import reference_metrics, reference_ranking


@pytest.fixture
def task_dir(tmp_path):
    """A task TINY: 0/1 labels; some first sentences repeat, some second sentences repeat."""
    rows = [(MANY[i % 12], MANY[20 + i % 17], int(i % 3 != 0)) for i in range(30)]
    (tmp_path / "TINY").mkdir()
    (tmp_path / "TINY" / "TINY.test.data").write_text("".join("%s\t%s\t%d\n" % row for row in rows), encoding="utf-8")
    (tmp_path / "TINY" / "TINY.valid.data").write_text(
        "".join("%s\t%s\t1\n" % (MANY[40 + i], MANY[60 + i]) for i in range(10)), encoding="utf-8"
    )
    distractors = tmp_path / "distractors.txt"
    distractors.write_text("".join(s + "\n" for s in MANY[70:80] + MANY[20:22]), encoding="utf-8")
    return tmp_path, rows, str(distractors)


@pytest.mark.parametrize("beta, gamma", [(1.0, 1.0), (0.0, 0.0)])
def test_eval_retrieval_matches_the_definition_recomputed_by_hand(task_dir, tiny_model, encoders, beta, gamma):
    tmp_path, rows, distractors = task_dir
    output = tmp_path / "r.json"
    assert (
        run(
            "eval-retrieval",
            "--model",
            tiny_model[0],
            "--task",
            "TINY",
            "--data-dir",
            tmp_path,
            "--n-components",
            "0,-1,8",
            "--beta",
            beta,
            "--gamma",
            gamma,
            "--distractors",
            distractors,
            "--hnsw-m",
            8,
            "--json",
            output,
            "--plot",
            tmp_path / "r.png",
        )
        == 0
    )
    report = json.loads(output.read_text(encoding="utf-8"))
    entry = report["tasks"]["TINY"]

    queries = list(dict.fromkeys(a for a, _, label in rows if label == 1))
    corpus = list(dict.fromkeys(b for _, b, _ in rows))
    corpus += [s for s in dict.fromkeys(MANY[70:80] + MANY[20:22]) if s not in corpus]
    relevant = [{corpus.index(b) for a, b, label in rows if a == query and label == 1} for query in queries]
    assert entry["counts"] == {
        "pairs": 30,
        "queries": len(queries),
        "corpus": len(corpus),
        "distractors": 10,
        "relevant": sum(len(items) for items in relevant),
        "fitted_on_vectors": 2 * (30 + 10),  # fit on all: both sentences of the test and valid pairs
    }
    assert (report["split"], report["fit_on"], report["cutoff"]) == ("test", "all", 10)
    assert report["distractor_files"] == [distractors]
    assert report["hnsw"] == {"m": 8, "ef_construction": 40, "ef_search": 64}

    encoder = encoders["first-last-avg"]
    valid = [(MANY[40 + i], MANY[60 + i]) for i in range(10)]
    fit_sentences = [s for a, b, _ in rows for s in (a, b)] + [s for pair in valid for s in pair]
    whitening = fit_whitening(WhiteningStats().update(encode(encoder, fit_sentences)), beta=beta, gamma=gamma)
    query_vectors, corpus_vectors = encode(encoder, queries), encode(encoder, corpus)
    by_k = {result["n_components"]: result for result in entry["results"]}
    assert sorted(by_k) == [0, 8, 24]
    for k, result in by_k.items():
        assert (result["beta"], result["gamma"]) == ((1.0, 1.0) if k == 0 else (beta, gamma))
        transform = functools.partial(whitening.transform, n_components=k) if k else l2_normalize
        expected = reference_metrics(reference_ranking(transform(query_vectors), transform(corpus_vectors)), relevant)
        assert {m: result[m] for m in expected} == pytest.approx(expected, abs=1e-9)
        assert result["dim"] == (k or 24) and result["flat"]["index_bytes"] > len(corpus) * result["dim"] * 4
        assert result["hnsw"]["recall@10_vs_exact"] > 0.5 and result["flat"]["p50_ms"] > 0
        assert (result["hnsw"]["m"], result["hnsw"]["ef_search"]) == (8, 64)
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_eval_retrieval_scores_the_split_asked_fitted_on_train(task_dir, tiny_model):
    """--split valid --fit-on train: the valid pairs scored, the whitening fitted on the train
    pairs' sentences alone; a distractor pair file's malformed line is skipped when asked."""
    tmp_path, rows, _ = task_dir
    train = [(MANY[i], MANY[i + 30], 1) for i in range(8)]
    (tmp_path / "TINY" / "TINY.train.data").write_text("".join("%s\t%s\t%d\n" % r for r in train), encoding="utf-8")
    distractors = tmp_path / "pairs.txt"
    distractors.write_text("%s\t%s\t1\nno label\tat all\n%s\t%s\t0\n" % tuple(MANY[70:74]), encoding="utf-8")
    output = tmp_path / "r.json"
    argv = ["--model", tiny_model[0], "--task", "TINY", "--data-dir", tmp_path, "--n-components", "0,8"]
    argv += ["--split", "valid", "--fit-on", "train", "--distractors", distractors, "--hnsw-m", 8, "--json", output]
    assert run("eval-retrieval", *argv) == 1  # the malformed line
    assert run("eval-retrieval", *argv, "--skip-bad-lines") == 0
    report = json.loads(output.read_text(encoding="utf-8"))
    assert (report["split"], report["fit_on"]) == ("valid", "train")
    counts = report["tasks"]["TINY"]["counts"]
    assert counts == {
        "pairs": 10,
        "queries": 10,
        "corpus": 10 + 4,
        "distractors": 4,
        "relevant": 10,
        "fitted_on_vectors": 2 * 8,
    }


def test_eval_retrieval_keeps_every_dimension_of_a_rank_deficient_fit_when_allowed(tmp_path, tiny_model):
    """Ten sentences span 9 centred dimensions of 24: n_components -1 keeps those 9, or all 24
    with --allow-rank-deficient."""
    (tmp_path / "FEW").mkdir()
    pairs = [(MANY[i], MANY[i + 40], 1) for i in range(5)]
    (tmp_path / "FEW" / "FEW.test.data").write_text("".join("%s\t%s\t%d\n" % r for r in pairs), encoding="utf-8")
    output = tmp_path / "r.json"
    argv = ["--model", tiny_model[0], "--task", "FEW", "--data-dir", tmp_path, "--n-components", "-1", "--json", output]
    for extra, k in (([], 9), (["--allow-rank-deficient"], 24)):
        assert run("eval-retrieval", *argv, "--hnsw-m", 4, *extra) == 0
        (result,) = json.loads(output.read_text(encoding="utf-8"))["tasks"]["FEW"]["results"]
        assert (result["n_components"], result["dim"]) == (k, k)


def test_eval_retrieval_scores_several_poolings_on_one_pass_as_each_alone(task_dir, tiny_model, monkeypatch, capsys):
    tmp_path, _, distractors = task_dir
    output = tmp_path / "r.json"
    argv = ["eval-retrieval", "--model", tiny_model[0], "--task", "TINY", "--data-dir", tmp_path]
    argv += ["--n-components", "0,8", "--distractors", distractors, "--hnsw-m", 8, "--json", output]
    alone = {}
    for pooling in ("cls", "last-avg"):
        assert run(*argv, "--pooling", pooling) == 0
        alone[pooling] = json.loads(output.read_text(encoding="utf-8"))["tasks"]["TINY"]
    assert "pooling" not in capsys.readouterr().out  # one pooling: its tables are titled by the task alone
    widths = []
    run_batches = encoding._run_batches
    monkeypatch.setattr(
        encoding, "_run_batches", lambda encoder, *rest: widths.append(encoder.dim) or run_batches(encoder, *rest)
    )
    assert run(*argv, "--pooling", "cls,last-avg") == 0
    assert widths == [48, 48]  # the task's sentences, then the distractors, each once for both
    printed = capsys.readouterr().out
    assert 0 <= printed.index("TINY, cls pooling") < printed.index("TINY, last-avg pooling")
    reports = json.loads(output.read_text(encoding="utf-8"))["poolings"]
    assert [report["pooling"] for report in reports] == ["cls", "last-avg"]
    for report in reports:
        got, expected = report["tasks"]["TINY"], alone[report["pooling"]]
        assert got["counts"] == expected["counts"]
        assert [r["setting"] for r in got["results"]] == [r["setting"] for r in expected["results"]]
        for mine, theirs in zip(got["results"], expected["results"], strict=True):
            for metric in ("mrr@10", "recall@1", "recall@10"):
                assert mine[metric] == pytest.approx(theirs[metric], abs=1e-9), (report["pooling"], metric)
    figures = {pooling: [(r["mrr@10"], r["recall@1"]) for r in entry["results"]] for pooling, entry in alone.items()}
    assert figures["cls"] != figures["last-avg"]  # a pooling's figures in another's place would show


def test_eval_retrieval_refuses_a_missing_split_and_odd_labels(task_dir, tiny_model, caplog, monkeypatch):
    tmp_path, _, _ = task_dir
    argv = [
        "eval-retrieval",
        "--model",
        tiny_model[0],
        "--task",
        "TINY",
        "--data-dir",
        tmp_path,
        "--n-components",
        "0,-1,8",
    ]  # the default 256 is refused on a 24-dim model
    assert run(*argv, "--split", "train") == 1
    assert "TINY has no train split" in caplog.text
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments: pytest.fail("built before the labels were checked"))
    test_file = tmp_path / "TINY" / "TINY.test.data"
    test_file.write_text("a\tb\t1\nc\td\t9\n", encoding="utf-8")
    assert run(*argv) == 1
    assert caplog.messages[-1] == "%s: pair 2's label is 9: labels are neither all 0/1 nor 0-5 scores" % test_file
    test_file.write_text("a\tb\t0\nc\td\t1.5\n", encoding="utf-8")  # 0-5 scores, none from 4 up
    assert run(*argv) == 1
    assert caplog.messages[-1] == (
        "%s: no positive pairs, so no queries (positive: pairs scored 4 or more (0-5 scores))" % test_file
    )
    # one stray label among 0/1 ones made the split 0-5 scores, its positives the one pair of 4.5
    test_file.write_text("".join("s%d\tt%d\t%d\n" % (i, i, i % 2) for i in range(20)) + "a\tb\t4.5\n")
    assert run(*argv) == 1
    assert caplog.messages[-1] == (
        "%s: pair 21's label is 4.5, where 20 of the 21 labels are 0 or 1: a 0/1 task with a stray label? "
        "(0/1 labels: positive at 1; 0-5 scores: at 4 and above)" % test_file
    )


@pytest.mark.parametrize("ks, kept", [("0,8", 24), ("8,4", 8)])
def test_eval_retrieval_refuses_a_corpus_that_cannot_be_scored_in_memory_before_encoding(
    task_dir, tiny_model, caplog, monkeypatch, ks, kept
):
    """With many distractors, the vectors and indexes of the corpus outgrew the memory after
    every sentence was encoded. Counted before: the distractors' float32 vectors of both
    poolings (24 columns each), each pooling's corpus in float64, and at the largest k asked (0
    keeps all 24) a setting's float64 corpus, its float32 copy and two indexes of 4 bytes a
    dimension. A byte less than that is refused, naming the limit; at that, the task is scored."""
    from bert_whitening.io.bounded import MemoryLimit
    from bert_whitening.retrieval import evaluate

    tmp_path, rows, distractors = task_dir
    corpus = len(dict.fromkeys([b for _, b, _ in rows] + MANY[70:80] + MANY[20:22]))
    needs = {
        "of the distractors' float32 vectors, 48 columns": 4 * 10 * 48,
        "of the corpus in float64": 8 * corpus * 24,
        "of a setting's k=%d corpus: float64, float32, flat and HNSW indexes" % kept: 20 * corpus * kept,
    }
    argv = ["eval-retrieval", "--model", tiny_model[0], "--task", "TINY", "--data-dir", tmp_path, "--n-components", ks]
    argv += ["--pooling", "first-last-avg,cls", "--distractors", distractors, "--hnsw-m", 8]
    limit = MemoryLimit(sum(needs.values()) - 1, "the {} of a test")
    limit_memory_in(monkeypatch, evaluate, limit)
    real_encode = encoding.encode
    monkeypatch.setattr(encoding, "encode", lambda *arguments, **options: pytest.fail("encoded"))
    assert run(*argv) == 1
    assert one_error(caplog) == (
        "TINY: scoring a corpus of %d sentences (10 distractors) needs at least %.1f GB (%s), more than %s; "
        "give fewer distractors"
        % (corpus, sum(needs.values()) / 1e9, ", ".join("%.1f GB %s" % (v / 1e9, k) for k, v in needs.items()), limit)
    )
    if kept == 8:  # scored at the bound (once: a run of two poolings takes a while)
        monkeypatch.setattr(encoding, "encode", real_encode)
        limit_memory_in(monkeypatch, evaluate, MemoryLimit(limit.bytes + 1, limit.source))
        assert run(*argv, "--json", tmp_path / "r.json") == 0


def test_distractors_that_are_queries_are_said(task_dir, tiny_model, tmp_path, caplog):
    """Each such query finds itself first, as a non-relevant item: R@1 fell with no word why."""
    caplog.set_level(logging.INFO)
    directory, rows, _ = task_dir
    distractors = tmp_path / "queries.txt"
    distractors.write_text(MANY[1] + "\n" + MANY[70] + "\n", encoding="utf-8")  # MANY[1] is a query (row 1)
    argv = ["--model", tiny_model[0], "--task", "TINY", "--data-dir", directory, "--n-components", "0"]
    assert run("eval-retrieval", *argv, "--distractors", distractors) == 0
    assert "TINY.test: 1 distractors are queries too: each such query finds itself, not relevant, at cosine 1" in (
        caplog.messages
    )
    assert "TINY.test: the queries are the first sentences of the pairs labelled 1 (0/1 labels)" in caplog.messages


def test_only_distractors_that_are_queries_are_said_not_queries_a_pair_has_second(tmp_path, tiny_model, caplog):
    """MANY[1] is a query and the second sentence of a pair (its place in the corpus), MANY[0] a
    query and a distractor: one distractor is a query."""
    caplog.set_level(logging.INFO)
    (tmp_path / "T").mkdir()
    rows = [(MANY[0], MANY[1], 1), (MANY[1], MANY[2], 1), (MANY[3], MANY[4], 0)]
    (tmp_path / "T" / "T.test.data").write_text("".join("%s\t%s\t%d\n" % r for r in rows), encoding="utf-8")
    distractors = tmp_path / "distractors.txt"
    distractors.write_text(MANY[0] + "\n" + MANY[9] + "\n", encoding="utf-8")
    argv = ["--model", tiny_model[0], "--task", "T", "--data-dir", tmp_path, "--n-components", "0", "--hnsw-m", 4]
    assert run("eval-retrieval", *argv, "--distractors", distractors) == 0
    said = [message for message in caplog.messages if "distractors are queries too" in message]
    assert said == ["T.test: 1 distractors are queries too: each such query finds itself, not relevant, at cosine 1"]


def test_a_split_a_later_task_lacks_is_refused_before_any_task_is_encoded(task_dir, tiny_model, monkeypatch, caplog):
    from bert_whitening.retrieval import evaluate

    directory, rows, _ = task_dir
    (directory / "ONLY").mkdir()
    (directory / "ONLY" / "ONLY.test.data").write_text("".join("%s\t%s\t%d\n" % row for row in rows), encoding="utf-8")
    monkeypatch.setattr(evaluate, "encode_splits_together", lambda *args: pytest.fail("a task was encoded"))
    argv = ["--model", tiny_model[0], "--task", "TINY", "--task", "ONLY", "--data-dir", directory, "--split", "valid"]
    assert run("eval-retrieval", *argv, "--n-components", "0") == 1
    assert one_error(caplog) == "ONLY has no valid split (splits: test)"


def test_eval_retrieval_scores_each_code_on_one_encoding_with_its_bytes(task_dir, tiny_model, encoders, capsys):
    import numpy as np

    tmp_path, rows, _ = task_dir
    output = tmp_path / "r.json"
    argv = ["--model", tiny_model[0], "--task", "TINY", "--data-dir", tmp_path, "--n-components", "0,8"]
    assert run("eval-retrieval", *argv, "--codes", "float32,int8,binary", "--json", output) == 0
    report = json.loads(output.read_text(encoding="utf-8"))
    results = report["tasks"]["TINY"]["results"]
    assert report["codes"] == ["float32", "int8", "binary"]
    assert [(r["n_components"], r["codes"], r["bytes"]) for r in results] == [
        (0, "float32", 96),
        (0, "int8", 24),
        (0, "binary", 3),
        (8, "float32", 32),
        (8, "int8", 8),
        (8, "binary", 1),
    ]
    table = capsys.readouterr().out
    assert "binary      1" in table and "int8        8" in table

    queries = list(dict.fromkeys(a for a, _, label in rows if label == 1))
    corpus = list(dict.fromkeys(b for _, b, _ in rows))
    relevant = [{corpus.index(b) for a, b, label in rows if a == query and label == 1} for query in queries]
    encoder = encoders["first-last-avg"]
    fit_sentences = [s for a, b, _ in rows for s in (a, b)] + [
        s for i in range(10) for s in (MANY[40 + i], MANY[60 + i])
    ]
    whitening = fit_whitening(WhiteningStats().update(encode(encoder, fit_sentences)))
    for k in (0, 8):
        transform = functools.partial(whitening.transform, n_components=k) if k else l2_normalize
        query_vectors, corpus_vectors = transform(encode(encoder, queries)), transform(encode(encoder, corpus))
        signs = lambda vectors: np.where(vectors > 0, 1.0, -1.0)  # noqa: E731  the +-1 vectors bits stand for
        expected = reference_metrics(reference_ranking(signs(query_vectors), signs(corpus_vectors)), relevant)
        (binary,) = [r for r in results if (r["n_components"], r["codes"]) == (k, "binary")]
        assert {m: binary[m] for m in expected} == pytest.approx(expected, abs=1e-9)
        assert "flat" not in binary and binary["dim"] == (k or 24)

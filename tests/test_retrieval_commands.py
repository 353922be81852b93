"""eval-retrieval, index and search on the tiny checkpoint, against the definitions re-done here."""

import dataclasses
import functools
import itertools
import json
import logging
import os
import shutil

import numpy as np
import pytest
from test_retrieval import reference_metrics, reference_ranking

from bert_whitening import cli, encoding
from bert_whitening.encoding import encode
from bert_whitening.retrieval import search as search_module
from bert_whitening.retrieval.index_directory import IndexDirectory
from bert_whitening.vectors import l2_normalize
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import limit_memory_in

WORDS = ["今天", "天气", "很好", "我们", "在北京", "喝茶", "the cat", "is on", "the mat", "hello"]
MANY = ["".join(parts) for parts in itertools.permutations(WORDS, 3)][::7][:80]  # 80 sentences


def run(*argv):
    return cli.main([str(a) for a in argv])


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


def test_the_retrieval_table_shows_each_figure_in_its_column():
    from bert_whitening.retrieval.evaluate import format_retrieval_table

    flat = {"index_bytes": 2_500_000, "p50_ms": 0.25, "p99_ms": 1.5, "qps_batch64": 12345.6}
    hnsw = {"recall@10_vs_exact": 0.875, "p50_ms": 0.125}
    result = {"setting": "whiten-8", "dim": 8, "mrr@10": 0.5, "recall@1": 0.25, "recall@10": 0.75}
    entry = {
        "counts": {"queries": 3, "corpus": 20, "distractors": 5, "relevant": 4},
        "results": [dict(result, flat=flat, hnsw=hnsw)],
    }
    header, columns, row = format_retrieval_table("T", entry).splitlines()
    assert header == "T: 3 queries, corpus 20 (5 distractors), 4 relevant pairs"
    assert columns.split() == "setting dim MRR@10 R@1 R@10 index MB p50 ms p99 ms q/s@64 HNSW R@10 HNSW p50".split()
    assert row.split() == [
        "whiten-8",
        "8",
        "0.5000",
        "0.2500",
        "0.7500",
        "2.50",
        "0.250",
        "1.500",
        "12346",
        "0.8750",
        "0.125",
    ]


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


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_model):
    """A sentence corpus, a whitening fitted on it, its encode output and its index directory
    (built once: tests write their own outputs elsewhere)."""
    tmp_path = tmp_path_factory.mktemp("indexed")
    model = tiny_model[0]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(s + "\n" for s in MANY[:60]), encoding="utf-8")
    whitening, vectors, index = tmp_path / "w.npz", tmp_path / "v.npy", tmp_path / "index"
    assert run("fit", "--model", model, "--output", whitening, corpus) == 0
    assert (
        run("encode", "--model", model, "--whitening", whitening, "--n-components", 12, "--output", vectors, corpus)
        == 0
    )
    assert (
        run("index", "--model", model, "--whitening", whitening, "--n-components", 12, "--output", index, corpus) == 0
    )
    return model, corpus, whitening, vectors, index


def one_error(caplog):
    """The one line a refused command logged."""
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


def rows_of(index):
    """``[(file, line, text)]`` of every row of an index directory, in order."""
    opened = IndexDirectory(str(index))
    rows = opened.rows(set(range(opened.count)))
    return [rows[row] for row in range(opened.count)]


def test_index_holds_the_encode_vectors_with_their_lines(indexed):
    model, corpus, whitening, vectors, index = indexed
    np.testing.assert_allclose(IndexDirectory(str(index)).vectors(), np.load(vectors), atol=1e-6)
    assert rows_of(index)[:2] == [(str(corpus), 1, MANY[0]), (str(corpus), 2, MANY[1])]
    record = IndexDirectory(str(index)).metadata
    assert record["n_components"] == 12 and record["pooling"] == "first-last-avg"
    assert record["model"]["name"] == "tiny_bert" and record["count"] == 60
    assert record["whitening"]["path"] == str(whitening) and len(record["whitening"]["sha256"]) == 64


def test_index_from_vectors_equals_index_from_text(indexed, tmp_path):
    model, corpus, whitening, vectors, index = indexed
    again = tmp_path / "again"
    assert (
        run(
            "index",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            12,
            "--from-vectors",
            vectors,
            "--output",
            again,
            corpus,
        )
        == 0
    )
    np.testing.assert_array_equal(IndexDirectory(str(again)).vectors(), np.load(vectors))
    assert rows_of(again) == rows_of(index)
    assert IndexDirectory(str(again)).metadata == IndexDirectory(str(index)).metadata


def test_index_from_vectors_keys_the_rows_by_the_files_in_their_order(indexed, tmp_path):
    """The 60 vectors of corpus.txt with its lines in two files: rows 1-25 from the first, 26-60
    from the second."""
    model, corpus, whitening, vectors, index = indexed
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("".join(s + "\n" for s in MANY[:25]), encoding="utf-8")
    second.write_text("".join(s + "\n" for s in MANY[25:60]), encoding="utf-8")
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", vectors]
    assert run("index", *argv, "--output", tmp_path / "two", first, second) == 0
    expected = [(str(first), i + 1, MANY[i]) for i in range(25)] + [
        (str(second), i - 24, MANY[i]) for i in range(25, 60)
    ]
    assert rows_of(tmp_path / "two") == expected


def test_index_from_vectors_alone_keys_each_row_by_its_number(indexed, tmp_path, monkeypatch):
    model, corpus, whitening, vectors, index = indexed
    monkeypatch.setattr(search_module, "NPY_BLOCK_ROWS", 7)  # 60 rows in blocks of 7: the numbers run on
    alone = tmp_path / "alone"
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", vectors]
    assert run("index", *argv, "--output", alone) == 0
    assert rows_of(alone) == [(str(vectors), row, None) for row in range(1, 61)]
    np.testing.assert_array_equal(IndexDirectory(str(alone)).vectors(), np.load(vectors))


def test_index_from_vectors_refuses_bytes_after_the_rows_the_header_declares(indexed, tmp_path, caplog):
    """Read as the 60 rows its header says, and those bytes ignored, once."""
    model, corpus, whitening, vectors, index = indexed
    longer = tmp_path / "longer.npy"
    longer.write_bytes(vectors.read_bytes() + bytes(12 * 4))
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", longer]
    assert run("index", *argv, "--output", tmp_path / "i") == 1
    assert one_error(caplog) == (
        "%s: 48 bytes after the 60 rows its header declares: not the array its header says" % longer
    )
    assert not (tmp_path / "i").exists()


def test_search_finds_each_sentence_first_with_cosine_1(indexed, capsys):
    model, corpus, whitening, vectors, index = indexed
    capsys.readouterr()
    assert run("search", "--index", index, "--top-k", 3, "--format", "json", MANY[5], MANY[33]) == 0
    results = json.loads(capsys.readouterr().out)
    matrix = np.load(vectors)
    for result, row in zip(results, (5, 33), strict=True):
        top = result["hits"][0]
        assert (top["line"], top["text"]) == (row + 1, MANY[row]) and top["score"] == pytest.approx(1, abs=1e-5)
        expected = np.sort(matrix @ matrix[row])[::-1][:3]
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], expected, atol=1e-5)
    assert run("search", "--index", index, MANY[5]) == 0
    assert MANY[5] in capsys.readouterr().out


def test_search_gives_ten_hits_by_default_ranked_from_1(indexed):
    model, corpus, whitening, vectors, index = indexed
    from bert_whitening.retrieval.search import search

    (result,) = search(str(index), [MANY[7]])
    matrix = np.load(vectors)
    cosines = matrix.astype(np.float64) @ matrix[7].astype(np.float64)
    assert [hit["rank"] for hit in result["hits"]] == list(range(1, 11))
    np.testing.assert_allclose([hit["score"] for hit in result["hits"]], np.sort(cosines)[::-1][:10], atol=1e-5)
    assert all(hit["text"] == MANY[hit["line"] - 1] for hit in result["hits"])


@pytest.mark.parametrize("top_k", [0, -3, True, 2.0])
def test_search_refuses_a_top_k_that_is_no_positive_integer(indexed, top_k, monkeypatch):
    from bert_whitening import models
    from bert_whitening.retrieval.search import search

    monkeypatch.setattr(models, "build", lambda *_: pytest.fail("the model was built"))
    with pytest.raises(ValueError, match="^top_k must be a positive integer"):
        search(str(indexed[-1]), ["query"], top_k=top_k)


def test_hits_without_text_are_shown_by_file_and_line():
    from bert_whitening.retrieval.search import format_hits

    results = [{"query": "q", "hits": [{"rank": 1, "score": 0.5, "file": "v.npy", "line": 3, "text": None}]}]
    results[0]["hits"].append({"rank": 2, "score": 0.25, "file": "c.txt", "line": 4, "text": "four"})
    assert format_hits(results) == "query: q\n   1  0.5000  (v.npy:3)\n   2  0.2500  four"


def test_an_index_of_n_components_0_holds_no_whitening_and_refuses_one(indexed, tmp_path, caplog):
    """A whitening given with n_components 0 is not applied: the index neither stores it nor
    takes it from a search."""
    model, corpus, whitening, vectors, index = indexed
    plain = tmp_path / "plain"
    argv = ["--model", model, "--whitening", whitening, "--n-components", 0, "--output", plain, corpus]
    assert run("index", *argv) == 0
    assert sorted(os.listdir(plain)) == ["index.faiss", "index.json", "keys.tsv", "texts.jsonl"]
    assert IndexDirectory(str(plain)).whitening() is None
    assert run("search", "--index", plain, "--whitening", whitening, "query") == 1
    assert one_error(caplog) == "%s is not the whitening %s was built with (it has none): refused" % (whitening, plain)


def test_build_index_refuses_vectors_not_normalised_nothing_to_index_and_an_m_not_an_int(indexed, tmp_path):
    from bert_whitening.config import EncoderConfig

    model = indexed[0]
    with pytest.raises(ValueError, match="^an index holds L2-normalised vectors: --no-normalize cannot be used$"):
        search_module.build_index(
            EncoderConfig(model=model, normalize=False), str(tmp_path / "index"), inputs=[str(indexed[1])]
        )
    with pytest.raises(ValueError, match="^nothing to index: give sentence files, --from-vectors or --from-beam$"):
        search_module.build_index(EncoderConfig(model=model, normalize=True), str(tmp_path / "index"))
    for m in (None, False, 0.0):  # an exact index is hnsw_m 0, the integer
        with pytest.raises(ValueError, match=r"^hnsw_m must be 0 \(exact\) or an integer 2\.\.512, got %r$" % m):
            search_module.build_index(
                EncoderConfig(model=model, normalize=True), str(tmp_path / "i"), search_module.IndexOptions(hnsw_m=m)
            )
    assert os.listdir(tmp_path) == []


def test_search_refuses_another_encoder(indexed, tmp_path, caplog):
    model, corpus, whitening, vectors, index = indexed
    other = tmp_path / "other.npz"
    assert run("fit", "--model", model, "--output", other, vectors.parent / "corpus.txt", "--beta", 0.5) == 0
    assert run("search", "--index", index, "--whitening", other, "query") == 1
    assert "other.npz is not the whitening %s was built with" % index in caplog.text
    assert run("search", "--index", index, "--pooling", "cls", "query") == 1
    assert "built with first-last-avg pooling, not cls: refused" in caplog.text


def edited_copy(directory, tmp_path, **entries):
    """A copy of the index ``directory`` whose index.json has ``entries`` in place of its own."""
    edited = tmp_path / "edited"
    shutil.copytree(directory, edited)
    metadata = json.loads((edited / "index.json").read_text(encoding="utf-8"))
    (edited / "index.json").write_text(json.dumps(dict(metadata, **entries)), encoding="utf-8")
    return edited


@pytest.mark.parametrize(
    "edit, fragment",
    [
        ({"n_components": 6}, "'dim' is 12, but its encoder gives vectors of dimension 6 (n_components)"),
        ({"normalize": False}, "'normalize' is False, expected true"),
        ({"index": "bogus"}, "'index' is 'bogus'"),
    ],
)
def test_search_and_export_refuse_an_index_json_no_index_has(indexed, tmp_path, caplog, edit, fragment):
    """Once a traceback from FAISS (a query of another dimension) or TensorFlow (a corpus of another
    dimension in serve_search), or scores that were not cosines."""
    model, corpus, whitening, vectors, index = indexed
    edited = edited_copy(index, tmp_path, **edit)
    k = edit.get("n_components", 12)
    argv = ["--model", model, "--whitening", whitening, "--n-components", k, "--corpus", edited]
    for command in (["search", "--index", edited, "query"], ["export", *argv, "--output", tmp_path / "served"]):
        caplog.clear()
        assert run(*command) == 1
        assert one_error(caplog).startswith("%s: index.json: %s" % (edited, fragment))
    assert not (tmp_path / "served").exists()


def test_search_refuses_an_index_at_odds_with_itself_before_the_model_is_built(indexed, tmp_path, caplog, monkeypatch):
    """Once refused only after the model was built and every query encoded."""
    from bert_whitening import models

    edited = edited_copy(indexed[-1], tmp_path, count=59)
    monkeypatch.setattr(models, "build", lambda *_: pytest.fail("the model was built"))
    assert run("search", "--index", edited, "query") == 1
    assert one_error(caplog) == "%s: index.faiss holds 60 vectors of dimension 12; index.json says 59 of 12" % edited


def test_a_missing_model_is_blamed_on_whoever_named_it(indexed, tmp_path, caplog):
    """A --model is the command line's, a recorded directory the index's."""
    gone = tmp_path / "gone"
    assert run("search", "--index", indexed[-1], "--model", gone, "query") == 1
    assert one_error(caplog) == "model directory %s does not exist" % gone
    caplog.clear()
    edited = edited_copy(indexed[-1], tmp_path, model_dir=str(gone))
    assert run("search", "--index", edited, "query") == 1
    assert one_error(caplog) == "%s: model directory %s does not exist" % (edited / "index.json", gone)


@pytest.mark.parametrize("missing", [True, False])
def test_an_index_that_is_no_directory_is_refused_for_what_it_is(indexed, tmp_path, caplog, missing):
    model, corpus, whitening, vectors, index = indexed
    given, problem = (tmp_path / "missing", "the directory does not exist") if missing else (corpus, "not a directory")
    export = ["export", "--model", model, "--corpus", given, "--output", tmp_path / "served"]
    for command in (["search", "--index", given, "query"], export):
        caplog.clear()
        assert run(*command) == 1
        assert one_error(caplog) == "%s: %s" % (given, problem)


def test_search_refuses_no_queries_or_an_empty_one_naming_where(indexed, tmp_path, caplog):
    empty = tmp_path / "queries.txt"
    empty.write_text("", encoding="utf-8")
    assert run("search", "--index", indexed[-1], "--queries", empty) == 1
    assert one_error(caplog) == "%s: no queries in it" % empty
    caplog.clear()
    assert run("search", "--index", indexed[-1]) == 1
    assert one_error(caplog) == "no queries: give QUERY arguments or --queries FILE"
    empty.write_text("one\n \nthree\n", encoding="utf-8")  # a blank line was searched as the empty sentence
    caplog.clear()
    assert run("search", "--index", indexed[-1], "--queries", empty) == 1
    assert one_error(caplog) == "%s:2: an empty query: nothing to search for" % empty
    caplog.clear()
    assert run("search", "--index", indexed[-1], "fine", "") == 1
    assert one_error(caplog) == "QUERY 2 is empty: nothing to search for"


@pytest.mark.parametrize("other, named", [("corpus", "INPUT files"), ("vectors", "--from-vectors")])
def test_index_from_beam_with_another_source_is_refused_not_ignored(indexed, tmp_path, caplog, other, named):
    from bert_whitening.config import EncoderConfig

    model, corpus, whitening, vectors, index = indexed
    shards, output = str(tmp_path / "vectors-*"), tmp_path / "index"
    sources = {"inputs": [str(corpus)]} if other == "corpus" else {"from_vectors": str(vectors)}
    argv = [corpus] if other == "corpus" else ["--from-vectors", vectors]
    expected = "--from-beam takes its keys from the shards and indexes no texts: give it without %s" % named
    assert run("index", "--model", model, "--from-beam", shards, "--output", output, *argv) == 1
    assert one_error(caplog) == expected
    with pytest.raises(ValueError, match="^%s$" % expected):  # from Python too
        search_module.build_index(EncoderConfig(model=model, normalize=True), str(output), from_beam=shards, **sources)
    assert not output.exists()


@pytest.mark.parametrize("other", ["inputs", "from_vectors"])
def test_sentences_given_to_build_index_are_indexed_alone(indexed, tmp_path, other):
    """Given with files or vectors, the files or vectors were ignored without a word."""
    from bert_whitening.config import EncoderConfig

    model, corpus, _, vectors, _ = indexed
    sources = {"inputs": [str(corpus)]} if other == "inputs" else {"from_vectors": str(vectors)}
    with pytest.raises(ValueError, match="^sentences are indexed alone: give them without inputs, from_vectors"):
        search_module.build_index(
            EncoderConfig(model=model, normalize=True), str(tmp_path / "index"), sentences=["a", "b"], **sources
        )
    assert not (tmp_path / "index").exists()


def test_failed_index_leaves_no_directory(indexed, tmp_path, caplog):
    model, corpus, whitening, vectors, index = indexed
    short = tmp_path / "short.txt"
    short.write_text("one line\n", encoding="utf-8")
    target = tmp_path / "bad"
    assert (
        run(
            "index",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            12,
            "--from-vectors",
            vectors,
            "--output",
            target,
            short,
        )
        == 1
    )
    assert "fewer lines than vectors" in caplog.text
    assert not target.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]


@pytest.mark.parametrize(
    "whitened, said",
    [
        (False, "24 (tiny_bert, not whitened): whitened vectors? give the --whitening FILE.npz and --n-components 12"),
        (True, "24 (tiny_bert, n_components 24): give the --n-components 12"),  # a whitening keeps all 24 by default
    ],
)
def test_index_from_vectors_of_another_dimension_blames_the_vectors(indexed, tmp_path, caplog, whitened, said):
    """Not the first line of the corpus they were indexed with, as it once did."""
    model, corpus, whitening, vectors, index = indexed
    options = ["--whitening", whitening] if whitened else []
    assert run("index", "--model", model, *options, "--from-vectors", vectors, "--output", tmp_path / "i", corpus) == 1
    expected = "%s: vectors of dimension 12, but the encoder options give %s they were made with" % (vectors, said)
    assert one_error(caplog) == expected
    assert not (tmp_path / "i").exists()


@pytest.mark.slow
def test_index_from_beam_encode_shards(indexed, tmp_path):
    model, corpus, whitening, vectors, index = indexed
    prefix = tmp_path / "beam" / "vectors"
    assert (
        run(
            "beam-encode",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            12,
            "--input",
            corpus,
            "--num-shards",
            2,
            "--output",
            prefix,
        )
        == 0
    )
    from_beam = tmp_path / "from_beam"
    assert (
        run(
            "index",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            12,
            "--from-beam",
            "%s-*" % prefix,
            "--output",
            from_beam,
        )
        == 0
    )
    assert [row[:2] for row in rows_of(from_beam)] == [row[:2] for row in rows_of(index)]
    np.testing.assert_allclose(IndexDirectory(str(from_beam)).vectors(), np.load(vectors), atol=1e-5)


def test_index_from_beam_refuses_shards_another_encoder_made(indexed, tmp_path, caplog):
    """The shards recorded nothing of their encoder: indexed with another k, or without the
    whitening they were made with, their vectors were taken as this encoder's."""
    model, corpus, whitening, vectors, index = indexed
    prefix = tmp_path / "vectors"
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12]
    assert run("beam-encode", *argv, "--input", corpus, "--output", prefix) == 0
    assert run("index", *argv[:-1], 8, "--from-beam", "%s-*" % prefix, "--output", tmp_path / "i8") == 1
    assert one_error(caplog) == (
        "%s-*.tfrecord were encoded with another encoder than this one (ours vs the shards': n_components: 8 vs 12)"
        % prefix
    )
    assert not (tmp_path / "i8").exists()


def test_search_answers_from_the_index_after_the_corpus_file_changed(tiny_model, tmp_path, capsys):
    corpus, index = tmp_path / "corpus.txt", tmp_path / "index"
    corpus.write_text("".join(s + "\n" for s in MANY[:20]), encoding="utf-8")
    assert run("index", "--model", tiny_model[0], "--output", index, corpus) == 0  # no whitening
    corpus.write_text("an inserted first line\n" + corpus.read_text(encoding="utf-8"), encoding="utf-8")
    capsys.readouterr()
    assert run("search", "--index", index, "--top-k", 500000000, "--format", "json", MANY[3]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert len(hits) == 20  # top-k clamped to the corpus
    assert (hits[0]["line"], hits[0]["text"]) == (4, MANY[3]) and hits[0]["score"] == pytest.approx(1, abs=1e-5)


def test_index_reads_standard_input_once(tiny_model, tmp_path, monkeypatch):
    import io
    import sys

    corpus, index = tmp_path / "corpus.txt", tmp_path / "index"
    corpus.write_text("".join(s + "\n" for s in MANY[:10]), encoding="utf-8")
    stdin_file = open(corpus, "rb")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin_file))
    assert run("index", "--model", tiny_model[0], "--output", index, "-") == 0
    assert rows_of(index) == [("-", i + 1, MANY[i]) for i in range(10)]  # "-", not a file of that name


@pytest.mark.parametrize("option", [["--maxlen", 8], ["--cased"]])
def test_export_corpus_refuses_an_index_of_another_maxlen_or_case(indexed, tmp_path, caplog, option):
    """An index of the same maxlen and case is taken: test_export_search.test_cli_export_corpus_from_an_index.
    The whitening is one that records no tokenization (a file of an earlier version): one that
    does is refused by an encoder of another maxlen or case already (test_models)."""
    from bert_whitening.whitening import Whitening

    model, corpus, recorded, vectors, index = indexed
    whitening = tmp_path / "earlier.npz"
    dataclasses.replace(Whitening.load(str(recorded)), tokenization={}).save(str(whitening))
    other = tmp_path / "index"
    assert (
        run(
            "index",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            12,
            "--output",
            other,
            *option,
            corpus,
        )
        == 0
    )
    argv = ["--whitening", whitening, "--n-components", 12, "--corpus", other, "--output", tmp_path / "served"]
    assert run("export", "--model", model, *argv) == 1 and "refused" in caplog.text
    assert ("maxlen: 64 vs 8" if option[0] == "--maxlen" else "lowercase: True vs False") in caplog.text
    assert not (tmp_path / "served").exists()


@pytest.fixture
def swapped_while_open(indexed, tmp_path, monkeypatch):
    """A copy of ``indexed``'s index, and another index of the same encoder and row count that
    is renamed over it as soon as a command has opened (and checked) it."""
    model, corpus, whitening, vectors, index = indexed
    mine, other, other_corpus = tmp_path / "index", tmp_path / "other", tmp_path / "other.txt"
    shutil.copytree(index, mine)
    other_corpus.write_text("".join(s + "\n" for s in MANY[20:80]), encoding="utf-8")  # MANY[5] not in it
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--output", other, other_corpus]
    assert run("index", *argv) == 0

    class SwappedWhileOpen(IndexDirectory):
        def __init__(self, directory):
            super().__init__(directory)
            if os.path.exists(other):
                os.rename(mine, tmp_path / "retired")
                os.rename(other, mine)

    monkeypatch.setattr(search_module, "IndexDirectory", SwappedWhileOpen)
    return mine


def test_search_answers_from_the_index_it_checked_when_another_is_renamed_over_it(swapped_while_open, capsys):
    capsys.readouterr()
    assert run("search", "--index", swapped_while_open, "--top-k", 3, "--format", "json", MANY[5]) == 0
    top = json.loads(capsys.readouterr().out)[0]["hits"][0]
    assert (top["line"], top["text"]) == (6, MANY[5]) and top["score"] == pytest.approx(1, abs=1e-5)


def test_export_corpus_takes_the_vectors_it_checked_when_another_index_is_renamed_over_it(indexed, swapped_while_open):
    config = search_module.query_config(IndexDirectory(str(indexed[-1])))
    vectors, _ = search_module.corpus_for_export(str(swapped_while_open), config)
    np.testing.assert_array_equal(vectors, IndexDirectory(str(indexed[-1])).vectors())


def test_export_corpus_records_the_index_it_serves(indexed):
    model, corpus, whitening, vectors, index = indexed
    config = search_module.query_config(IndexDirectory(str(index)))
    served, record = search_module.corpus_for_export(str(index), config)
    np.testing.assert_allclose(served, np.load(vectors), atol=1e-6)
    assert record == {"index": str(index), "count": 60, "dim": 12, "keys": "keys.tsv", "texts": "texts.jsonl"}


@pytest.mark.parametrize("hnsw", [0, 8])
def test_an_index_that_outgrows_memory_is_refused_at_the_block_that_does_not_fit(
    indexed, tmp_path, caplog, monkeypatch, hnsw
):
    """An index is held in memory until it is written, and a stream's size is not known before
    it is read: 60 vectors added in blocks of 7 (float32 of dimension 12, and for HNSW 2 M
    neighbour ids of 4 bytes a row) are refused at the block whose total does not fit, in one
    line, and nothing is left at the output; with room for all 60, the index is written."""
    from bert_whitening.io.bounded import MemoryLimit
    from bert_whitening.retrieval import index_directory

    model, corpus, whitening, vectors, _ = indexed
    per_row = 4 * 12 + 4 * 2 * hnsw
    monkeypatch.setattr(search_module, "NPY_BLOCK_ROWS", 7)
    limit_memory_in(monkeypatch, index_directory, MemoryLimit(per_row * 60 - 1, "the {} of a test"))
    argv = ["index", "--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", vectors]
    argv += ["--hnsw", hnsw, corpus]
    assert run(*argv, "--output", tmp_path / "index") == 1
    needs = "%.1f GB of float32 vectors of dimension 12" % (4 * 12 * 60 / 1e9)
    needs += ", %.1f GB of HNSW links (M 8)" % (4 * 16 * 60 / 1e9) if hnsw else ""
    assert one_error(caplog).endswith(
        "%s: an index of 60 vectors needs at least %.1f GB (%s), more than the %.1f GB of a test; index fewer "
        "sentences at a time, or keep fewer dimensions (--n-components)"
        % (vectors, per_row * 60 / 1e9, needs, (per_row * 60 - 1) / 1e9)
    )
    assert os.listdir(tmp_path) == []  # nor a staging directory
    limit_memory_in(monkeypatch, index_directory, MemoryLimit(per_row * 60, "the {} of a test"))
    assert run(*argv, "--output", tmp_path / "index") == 0
    assert IndexDirectory(str(tmp_path / "index")).count == 60


def test_an_index_that_cannot_be_read_into_memory_is_refused_before_faiss_reads_it(indexed, caplog, monkeypatch):
    """``search`` (and ``export --corpus``) read the whole FAISS index: one larger than the
    memory this process may use is refused, naming the directory; at its size, it is searched."""
    from bert_whitening.io.bounded import MemoryLimit
    from bert_whitening.retrieval import index_directory

    model, corpus, whitening, vectors, index = indexed
    size = os.path.getsize(index / "index.faiss")
    limit_memory_in(monkeypatch, index_directory, MemoryLimit(size - 1, "the {} of a test"))
    assert run("search", "--index", index, "今天天气很好") == 1
    assert one_error(caplog) == (
        "%s: reading index.faiss needs at least %.1f GB (%.1f GB of its FAISS index), more than the %.1f GB of a test"
        % (index, size / 1e9, size / 1e9, (size - 1) / 1e9)
    )
    limit_memory_in(monkeypatch, index_directory, MemoryLimit(size, "the {} of a test"))
    assert run("search", "--index", index, "今天天气很好") == 0


def test_export_corpus_refuses_a_corpus_whose_copies_cannot_fit(indexed, monkeypatch):
    """``export --corpus`` holds the index's vectors read back and the SavedModel's variable of
    them (float32, 60 x 12 each) at once: a byte less is refused before the index is read."""
    from bert_whitening.errors import DataError
    from bert_whitening.io.bounded import MemoryLimit

    model, corpus, whitening, vectors, index = indexed
    config = search_module.query_config(IndexDirectory(str(index)))
    limit_memory_in(monkeypatch, search_module, MemoryLimit(2 * 4 * 60 * 12 - 1, "the {} of a test"))
    monkeypatch.setattr(IndexDirectory, "vectors", lambda self: pytest.fail("read"))
    with pytest.raises(DataError, match=r"^%s: serving its corpus of 60 vectors needs at least " % index):
        search_module.corpus_for_export(str(index), config)
    monkeypatch.undo()
    limit_memory_in(monkeypatch, search_module, MemoryLimit(2 * 4 * 60 * 12, "the {} of a test"))
    served, _ = search_module.corpus_for_export(str(index), config)
    np.testing.assert_allclose(served, np.load(vectors), atol=1e-6)


def test_the_python_searches_refuse_an_empty_query_too(indexed):
    """Only the command line refused a blank query; the API searched the empty sentence."""
    from bert_whitening import SentenceEncoder
    from bert_whitening.retrieval.search import search

    model, corpus, whitening, vectors, index = indexed
    with pytest.raises(ValueError, match=r"^queries\[1\] is empty: nothing to search for$"):
        search(index, ["fine", " "])
    in_memory = SentenceEncoder.load(model).index(["今天天气很好", "我们在北京"])
    with pytest.raises(ValueError, match=r"^queries\[0\] is empty: nothing to search for$"):
        in_memory.search([""])


def assert_same_hits(results, expected):
    """``results`` are ``expected`` (lists of a `search`'s results), every score within 1e-5."""

    def apart(results):
        scores = [hit["score"] for result in results for hit in result["hits"]]
        rest = [{**result, "hits": [{**hit, "score": None} for hit in result["hits"]]} for result in results]
        return rest, scores

    (rest, scores), (expected_rest, expected_scores) = apart(results), apart(expected)
    assert rest == expected_rest
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-5)


def test_search_streams_its_queries_and_writes_what_one_search_of_them_all_gives(
    indexed, tmp_path, monkeypatch, capsys
):
    """A --queries file is searched QUERIES_AT_ONCE queries at a time, the model built once; the
    text and JSON written are those of one `search` of every query (json.dumps of its results),
    the scores within float noise (oneDNN's products round by the shape of the batch)."""
    from bert_whitening import models
    from bert_whitening.retrieval.search import format_hits, search

    model, corpus, whitening, vectors, index = indexed
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(s + "\n" for s in MANY[10:15]), encoding="utf-8")
    expected = search(str(index), [MANY[3]] + MANY[10:15], top_k=4)
    builds = []
    monkeypatch.setattr(models, "build", lambda config, build=models.build: builds.append(config) or build(config))
    monkeypatch.setattr(search_module, "QUERIES_AT_ONCE", 2)
    capsys.readouterr()
    assert run("search", "--index", index, "--top-k", 4, "--queries", queries, "--format", "json", MANY[3]) == 0
    written = capsys.readouterr().out
    assert written.endswith("]\n") and not written.endswith("\n\n")
    assert_same_hits(json.loads(written), expected)
    assert run("search", "--index", index, "--top-k", 4, "--queries", queries, MANY[3]) == 0
    assert capsys.readouterr().out == format_hits(expected) + "\n"
    assert len(builds) == 2  # once a command


def test_searched_reads_a_list_of_queries_once_the_hits_before_it_are_out(indexed):
    from bert_whitening.retrieval.search import searched

    pulled = []

    def query_lists():
        for number in range(3):
            pulled.append(number)
            yield MANY[number : number + 2], None

    results = searched(str(indexed[-1]), query_lists(), top_k=1)
    for number, found in enumerate(results):
        assert pulled == list(range(number + 1))
        assert [result["hits"][0]["text"] for result in found] == MANY[number : number + 2]


def test_search_checks_every_line_of_a_queries_file_before_the_index_is_opened(
    indexed, tmp_path, monkeypatch, capsys, caplog
):
    """Searched a few queries at a time, a file's empty line far down is still refused before
    anything is written; standard input, read once, is refused when its line is reached."""
    import io
    import sys

    monkeypatch.setattr(search_module, "QUERIES_AT_ONCE", 2)
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(s + "\n" for s in MANY[10:14]) + " \n" + MANY[15] + "\n", encoding="utf-8")
    capsys.readouterr()
    assert run("search", "--index", indexed[-1], "--queries", queries) == 1
    assert one_error(caplog) == "%s:5: an empty query: nothing to search for" % queries
    assert capsys.readouterr().out == ""
    caplog.clear()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(open(queries, "rb")))
    assert run("search", "--index", indexed[-1], "--queries", "-") == 1
    assert one_error(caplog).endswith(":5: an empty query: nothing to search for")
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("query: ")] == [
        "query: %s" % query for query in MANY[10:14]
    ]


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

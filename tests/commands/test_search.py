"""`search` on the tiny checkpoint: its hits, and the indexes and queries it refuses."""

import json
import os
import shutil

import numpy as np
import pytest

from bert_whitening.retrieval import search as search_module

from helpers import MANY, limit_memory_in, one_error, run


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


def test_search_answers_from_the_index_it_checked_when_another_is_renamed_over_it(swapped_while_open, capsys):
    capsys.readouterr()
    assert run("search", "--index", swapped_while_open, "--top-k", 3, "--format", "json", MANY[5]) == 0
    top = json.loads(capsys.readouterr().out)[0]["hits"][0]
    assert (top["line"], top["text"]) == (6, MANY[5]) and top["score"] == pytest.approx(1, abs=1e-5)


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


def test_hits_name_the_corpus_file_as_it_was_given(tiny_model, tmp_path, capsys, monkeypatch):
    """An index records each corpus file as the command line named it, so a search's hits show
    ``corpus.txt`` where the user typed it, not the machine's absolute path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("".join(s + "\n" for s in MANY[:5]), encoding="utf-8")
    assert run("index", "--model", tiny_model[0], "--output", "index", "corpus.txt") == 0
    capsys.readouterr()
    assert run("search", "--index", "index", "--top-k", 2, "--format", "json", MANY[1]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert [(hit["file"], hit["line"], hit["corpus_id"]) for hit in result["hits"]][0] == ("corpus.txt", 2, 1)
    assert str(tmp_path) not in json.dumps(result)


@pytest.mark.parametrize("codes", ["binary", "int8"])
def test_search_of_codes_rescoring_the_whole_corpus_gives_the_float_index_hits(indexed, tmp_path, capsys, codes):
    model, corpus, whitening, vectors, index = indexed
    coded = tmp_path / codes
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", vectors]
    assert run("index", *argv, "--codes", codes, "--rescore", 60, "--output", coded, corpus) == 0
    queries = [MANY[5], MANY[33], "a query of none of its lines"]
    capsys.readouterr()
    found = []
    for directory in (index, coded):
        assert run("search", "--index", directory, "--top-k", 5, "--format", "json", *queries) == 0
        found.append(json.loads(capsys.readouterr().out))
    assert [[hit["corpus_id"] for hit in result["hits"]] for result in found[1]] == [
        [hit["corpus_id"] for hit in result["hits"]] for result in found[0]
    ]
    for coded_result, float_result in zip(found[1], found[0], strict=True):  # float cosines, not codes'
        np.testing.assert_allclose(
            [hit["score"] for hit in coded_result["hits"]], [hit["score"] for hit in float_result["hits"]], atol=1e-5
        )

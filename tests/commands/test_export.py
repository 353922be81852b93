"""`export` from the command line: `--corpus`, the index it serves and the corpus it copies."""

import dataclasses
import json
import os

import numpy as np
import pytest

from bert_whitening import cli
from bert_whitening.retrieval import search as search_module
from bert_whitening.retrieval.index_directory import IndexDirectory
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import limit_memory_in, run


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


def test_cli_refuses_a_mismatched_whitening_before_writing(tiny_model, tmp_path, caplog):
    rng = np.random.default_rng(0)
    other = str(tmp_path / "other.npz")
    fit_whitening(WhiteningStats().update(rng.normal(size=(50, 16))), pooling="cls").save(other)
    base = tmp_path / "served"
    assert cli.main(["export", "--model", tiny_model[0], "--whitening", other, "--output", str(base)]) == 1
    assert "dimension 16 but the model's hidden size is 24" in caplog.text
    assert not base.exists() and sorted(os.listdir(tmp_path)) == ["other.npz"]


def test_cli_export_records_the_whitening_file(tiny_model, tmp_path):
    import hashlib

    rng = np.random.default_rng(0)
    whitening = str(tmp_path / "w.npz")
    fit_whitening(WhiteningStats().update(rng.normal(size=(60, 24))), pooling="cls").save(whitening)
    base = tmp_path / "served"
    argv = ["export", "--model", tiny_model[0], "--whitening", whitening, "--n-components", "8", "--output", str(base)]
    assert cli.main(argv) == 0  # pooling taken from the whitening file
    assert sorted(os.listdir(base)) == ["1"]
    with open(base / "1" / "assets" / "bert_whitening.json", encoding="utf-8") as stream:
        info = json.load(stream)
    with open(whitening, "rb") as stream:
        assert info["whitening_file"]["sha256"] == hashlib.sha256(stream.read()).hexdigest()
    assert info["pooling"] == "cls" and info["n_components"] == 8
    assert info["signatures"] == ["serve_dimensions", "serving_default"]
    assert cli.main(argv + ["--version", "1"]) == 1  # exists, no --overwrite

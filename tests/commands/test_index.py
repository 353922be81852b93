"""`index` on the tiny checkpoint: from text, from `.npy` vectors, from beam-encode shards."""

import os

import numpy as np
import pytest

from bert_whitening.retrieval import search as search_module
from bert_whitening.retrieval.index_directory import IndexDirectory

from helpers import MANY, limit_memory_in, one_error, run


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


def test_index_reads_standard_input_once(tiny_model, tmp_path, monkeypatch):
    import io
    import sys

    corpus, index = tmp_path / "corpus.txt", tmp_path / "index"
    corpus.write_text("".join(s + "\n" for s in MANY[:10]), encoding="utf-8")
    stdin_file = open(corpus, "rb")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin_file))
    assert run("index", "--model", tiny_model[0], "--output", index, "-") == 0
    assert rows_of(index) == [("-", i + 1, MANY[i]) for i in range(10)]  # "-", not a file of that name


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


@pytest.mark.parametrize("codes, size", [("binary", 2), ("int8", 12)])
def test_index_of_codes_records_them_and_reports_the_bytes_a_vector_takes_in_memory(
    indexed, tmp_path, caplog, codes, size
):
    model, corpus, whitening, vectors, index = indexed
    coded = tmp_path / codes
    argv = ["--model", model, "--whitening", whitening, "--n-components", 12, "--from-vectors", vectors]
    with caplog.at_level("INFO"):
        assert run("index", *argv, "--codes", codes, "--rescore", 7, "--output", coded, corpus) == 0
    opened = IndexDirectory(str(coded))
    assert (opened.metadata["codes"], opened.metadata["bytes_per_vector"], opened.metadata["rescore"]) == (
        codes,
        size,
        7,
    )
    assert "%d bytes a vector in memory" % size in caplog.text and "the 7 nearest rescored" in caplog.text
    np.testing.assert_array_equal(opened.vectors(), np.load(vectors))  # the float32 vectors beside the codes
    assert rows_of(coded) == rows_of(index)


def test_int8_codes_without_a_whitening_are_refused_before_the_model_is_built(indexed, tmp_path, caplog, monkeypatch):
    model, corpus, whitening, vectors, index = indexed
    monkeypatch.setattr("bert_whitening.commands.index.start", lambda args: pytest.fail("started"))
    assert run("index", "--model", model, "--codes", "int8", "--output", tmp_path / "out", corpus) == 1
    assert one_error(caplog).startswith("int8 codes take their scales from the whitening an index stores")
    assert not (tmp_path / "out").exists()


def test_codes_with_hnsw_are_refused_naming_both(indexed, tmp_path, caplog):
    model, corpus, whitening, vectors, index = indexed
    argv = ["--model", model, "--codes", "binary", "--hnsw-m", 8, "--output", tmp_path / "out", corpus]
    assert run("index", *argv) == 1
    assert "an index of binary codes is searched exactly: give hnsw_m 0" in one_error(caplog)

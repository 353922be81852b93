"""The Beam pipelines on DirectRunner against the single-process commands, on the tiny BERT."""
import glob
import logging
import os

import numpy as np
import pytest

from bert_whitening import cli
from bert_whitening.beam import WhiteningStatsFn, read_encoded
from bert_whitening.whitening import Whitening, WhiteningStats

from helpers import SENTENCES, relative_error, run

LINES = SENTENCES + ["%s %s" % (SENTENCES[i], SENTENCES[-1 - i]) for i in range(14)]


@pytest.fixture
def corpus(tmp_path):
    """Two sentence files (one without a final newline, one with an empty line) and a pair file."""
    directory = tmp_path / "corpus"
    directory.mkdir()
    (directory / "a.txt").write_text("\n".join(LINES[:17]), encoding="utf-8")  # LINES[11] is ""
    (directory / "b.txt").write_text("\n".join(LINES[17:]) + "\n", encoding="utf-8")
    pairs = ["%s\t%s\t%d" % (LINES[i], LINES[-1 - i], i % 2) for i in range(6)]
    (directory / "c.data").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    return directory


def covariance(whitening):
    """``U diag(s) U^T`` back from the stored kernel ``U diag(s ** -1/2)``."""
    basis = whitening.kernel * np.sqrt(whitening.eigenvalues)
    return (basis * whitening.eigenvalues) @ basis.T


def test_combine_fn_merges_as_one_pass():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(n, 5)) + 100 for n in (3, 10, 1, 7)]
    combine = WhiteningStatsFn()
    left = combine.add_input(combine.add_input(combine.create_accumulator(), batches[0]), batches[1])
    right = combine.add_input(combine.add_input(combine.create_accumulator(), batches[2]), batches[3])
    merged = combine.extract_output(combine.merge_accumulators([left, combine.create_accumulator(), right]))
    whole = WhiteningStats().update(np.concatenate(batches))
    assert merged.count == whole.count == 21
    assert relative_error(merged.covariance, whole.covariance) <= 1e-12


def test_beam_fit_equals_fit_on_the_same_lines(tiny_model, corpus, tmp_path):
    # One sentence per model call on both sides: each vector is then computed from the same
    # input shape, so what is compared is the statistics and their combination, not padding.
    model = tiny_model[0]
    files = [corpus / "a.txt", corpus / "b.txt", corpus / "c.data"]
    assert run("fit", "--model", model, "--batch-size", 1, "--output", tmp_path / "single.npz", *files) == 0
    assert run("beam-fit", "--model", model, "--batch-size", 1, "--input", corpus / "*.txt",
               "--input", corpus / "c.data", "--output", tmp_path / "beam.npz") == 0
    single, beamed = Whitening.load(tmp_path / "single.npz"), Whitening.load(tmp_path / "beam.npz")
    assert beamed.count == single.count == len(LINES) + 12
    assert (beamed.pooling, beamed.model_identity, beamed.rank) == (single.pooling, single.model_identity, single.rank)
    assert relative_error(beamed.mean, single.mean) <= 1e-9
    assert relative_error(covariance(beamed), covariance(single)) <= 1e-9
    rank = single.rank
    assert rank == 24  # all directions are real: no arbitrary null-space columns to compare
    signs = np.sign((beamed.kernel * single.kernel).sum(axis=0))
    scale = np.abs(single.kernel).max(axis=0)
    assert (np.abs(beamed.kernel * signs - single.kernel) <= 1e-6 * scale).all()


def test_beam_encode_writes_every_line_once_and_equals_encode(tiny_model, corpus, tmp_path):
    model = tiny_model[0]
    whitening = tmp_path / "w.npz"
    assert run("fit", "--model", model, "--output", whitening, corpus / "c.data", corpus / "a.txt") == 0
    prefix = tmp_path / "out" / "vectors"
    assert run("beam-encode", "--model", model, "--whitening", whitening, "--input", corpus / "*.txt",
               "--input", corpus / "a.txt", "--input", corpus / ".." / "corpus" / "b.txt",  # overlapping
               "--num-shards", 3, "--output", prefix) == 0
    assert len(glob.glob("%s-*-of-00003.tfrecord" % prefix)) == 3
    keys, vectors = read_encoded("%s-*" % prefix)
    expected = []
    for name in ("a.txt", "b.txt"):
        path = str(corpus / name)
        assert run("encode", "--model", model, "--whitening", whitening, "--output",
                   tmp_path / (name + ".npy"), path) == 0
        single = np.load(tmp_path / (name + ".npy"))
        expected += [((path, line), vector) for line, vector in enumerate(single, 1)]
    assert keys == [key for key, _ in expected]  # each line once, none missing, none added
    np.testing.assert_allclose(vectors, np.array([v for _, v in expected]), atol=1e-5)


def test_beam_encode_refuses_to_mix_with_existing_shards(tiny_model, corpus, tmp_path, caplog):
    prefix = tmp_path / "vectors"
    (tmp_path / "vectors-00000-of-00002.tfrecord").write_bytes(b"")
    assert run("beam-encode", "--model", tiny_model[0], "--input", corpus / "a.txt",
               "--output", prefix) == 1
    assert "1 output shards already exist" in caplog.text


def test_malformed_line_fails_the_pipeline_and_writes_nothing(tiny_model, corpus, tmp_path, caplog):
    with open(corpus / "c.data", "a", encoding="utf-8") as stream:
        stream.write("only one field\n")
    output = tmp_path / "w.npz"
    assert run("beam-fit", "--model", tiny_model[0], "--input", corpus / "*", "--output", output) == 1
    assert ("c.data:7: expected sentence1<TAB>sentence2<TAB>label with a finite numeric label, "
            "got 'only one field'") in caplog.text
    assert os.listdir(tmp_path) == ["corpus"]  # no whitening file, no temporary file

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert run("beam-fit", "--model", tiny_model[0], "--input", corpus / "*", "--skip-bad-lines",
                   "--output", output) == 0
    assert "c.data: skipped 1 malformed lines" in caplog.text
    assert Whitening.load(output).count == len(LINES) + 12


def test_unreadable_input_fails_beam_encode_without_leftovers(tiny_model, corpus, tmp_path, caplog):
    (corpus / "bad.txt").write_bytes(b"fine\n\xff\xfe not utf-8\n")
    out = tmp_path / "out"
    out.mkdir()
    assert run("beam-encode", "--model", tiny_model[0], "--input", corpus / "*.txt",
               "--output", out / "vectors") == 1
    assert "bad.txt:2: not UTF-8 text (byte 0xff" in caplog.text
    assert os.listdir(out) == []  # no shard, no sink temporary directory
    assert run("beam-encode", "--model", tiny_model[0], "--input", corpus / "none-*.txt",
               "--output", out / "vectors") == 1
    assert os.listdir(out) == []


def test_pipeline_options_only_for_beam_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", "--output", "w.npz", "--direct_num_workers=2", "x.txt"])
    assert "unrecognized arguments: --direct_num_workers=2" in capsys.readouterr().err


def test_empty_inputs_are_refused_before_the_pipeline_runs(tiny_model, tmp_path, caplog):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert run("beam-encode", "--model", tiny_model[0], "--input", tmp_path / "empty.txt",
               "--output", tmp_path / "vectors") == 1
    assert "empty.txt: empty input (no lines)" in caplog.text
    assert os.listdir(tmp_path) == ["empty.txt"]

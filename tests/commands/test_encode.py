"""`encode` from the command line: vectors, bad inputs, and no partial output."""

import numpy as np

from bert_whitening.encoding import encode
from bert_whitening.models import with_whitening
from bert_whitening.whitening import Whitening, WhiteningStats, fit_whitening

from helpers import MANY, run


def test_encode_without_whitening_writes_normalised_pooled_vectors(files, tiny_model, encoders):
    tmp_path, sentences, _ = files
    output = tmp_path / "v.npy"
    assert run("encode", "--model", tiny_model[0], "--pooling", "cls", "--output", output, sentences) == 0
    expected = encode(with_whitening(encoders["cls"]), MANY[:50])
    np.testing.assert_allclose(np.load(output), expected, atol=1e-6)
    assert (
        run("encode", "--model", tiny_model[0], "--pooling", "cls", "--no-normalize", "--output", output, sentences)
        == 0
    )
    np.testing.assert_allclose(np.load(output), encode(encoders["cls"], MANY[:50]), atol=1e-6)


def test_bad_inputs_fail_cleanly_without_output(files, tiny_model, tmp_path, caplog):
    _, sentences, pairs = files
    model = tiny_model[0]
    output = tmp_path / "out.npy"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert run("encode", "--model", model, "--output", output, empty) == 1
    assert "empty.txt: empty input" in caplog.text
    assert run("fit", "--model", model, "--output", tmp_path / "w.npz", empty) == 1

    broken = tmp_path / "broken.data"
    broken.write_text("a\tb\t1\nno label here\tx\n", encoding="utf-8")
    assert run("fit", "--model", model, "--output", tmp_path / "w.npz", broken) == 1
    assert "broken.data:2: expected" in caplog.text
    assert (
        run("fit", "--model", model, "--output", tmp_path / "w.npz", "--skip-bad-lines", "--n-components", 1, broken)
        == 0
    )
    assert "skipped 1 malformed lines" in caplog.text

    assert run("encode", "--model", str(tmp_path / "missing"), "--output", output, sentences) == 1
    assert "missing does not exist" in caplog.text

    rng = np.random.default_rng(0)
    other = tmp_path / "other.npz"
    fit_whitening(WhiteningStats().update(rng.normal(size=(50, 16))), pooling="first-last-avg").save(str(other))
    assert run("encode", "--model", model, "--whitening", other, "--output", output, sentences) == 1
    assert "dimension 16 but the model's hidden size is 24" in caplog.text
    assert run("fit", "--model", model, "--n-components", 30, "--output", other, sentences) == 1
    assert "n_components 30 is larger than the model's hidden size 24 (tiny_bert)" in caplog.text
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failure_midway_leaves_no_partial_output(files, tiny_model, monkeypatch):
    tmp_path, sentences, _ = files
    monkeypatch.setattr("bert_whitening.encoding.CHUNK_SENTENCES", 10)
    calls = []

    def failing(encoder, sequences, batch_size, bar):
        calls.append(len(sequences))
        if len(calls) == 3:
            raise OSError("simulated failure")
        return np.tile(np.eye(1, encoder.dim, dtype=np.float32), (len(sequences), 1))  # unit vectors

    monkeypatch.setattr("bert_whitening.encoding.encode_ids", failing)
    output = tmp_path / "v.npy"
    assert run("encode", "--model", tiny_model[0], "--output", output, sentences) == 1
    assert calls == [10, 10, 10] and not output.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_encode_writes_the_codes_the_whitening_was_fitted_with_and_floats_on_request(files, tiny_model, encoders):
    """fit --codes int8 stores the scales; encode writes int8 rows, --codes float32 the floats,
    --codes binary the packed signs: each the codes of the float rows, by `codes.py`'s definition."""
    tmp_path, sentences, _ = files
    model, whitening = tiny_model[0], tmp_path / "w8.npz"
    assert run("fit", "--model", model, "--pooling", "cls", "--codes", "int8", "--output", whitening, sentences) == 0
    outputs = {codes: tmp_path / ("%s.npy" % codes) for codes in ("default", "float32", "binary")}
    for codes, output in outputs.items():
        chosen = () if codes == "default" else ("--codes", codes)
        assert run("encode", "--model", model, "--whitening", whitening, *chosen, "--output", output, sentences) == 0
    floats, ints, bits = (np.load(outputs[name]) for name in ("float32", "default", "binary"))
    assert floats.dtype == np.float32 and ints.dtype == np.int8 and bits.dtype == np.uint8
    steps = Whitening.load(str(whitening)).quantizer().steps
    np.testing.assert_array_equal(ints, np.clip(np.rint(floats.astype(np.float64) / steps), -127, 127))
    np.testing.assert_array_equal(bits, np.packbits(floats > 0, axis=1))


def test_codes_a_vector_cannot_have_are_refused_before_the_model(files, tiny_model, caplog):
    tmp_path, sentences, _ = files
    model, output = tiny_model[0], tmp_path / "v.npy"
    assert run("encode", "--model", model, "--codes", "int8", "--output", output, sentences) == 1
    assert "int8 codes take their scales from a whitening" in caplog.text
    assert run("encode", "--model", model, "--codes", "binary", "--no-normalize", "--output", output, sentences) == 1
    assert "binary codes are of unit vectors: drop --no-normalize" in caplog.text
    assert not output.exists()

"""`fit` from the command line against the Python API, and the fits the data cannot give."""

import numpy as np

from bert_whitening.encoding import encode
from bert_whitening.whitening import Whitening, WhiteningStats, fit_whitening

from helpers import MANY, run


def test_fit_then_encode_equals_the_python_api(files, tiny_model, encoders):
    tmp_path, sentences, pairs = files
    model = tiny_model[0]
    whitening_path = tmp_path / "w.npz"
    assert run("fit", "--model", model, "--output", whitening_path, sentences, pairs) == 0
    whitening = Whitening.load(str(whitening_path))
    assert whitening.count == 80 and whitening.pooling == "first-last-avg"
    assert whitening.model_identity["name"] == "tiny_bert" and whitening.n_components == -1

    encoder = encoders["first-last-avg"]
    pair_sentences = [s for pair in zip(MANY[50:65], MANY[65:80], strict=True) for s in pair]
    expected = fit_whitening(WhiteningStats().update(encode(encoder, MANY[:50] + pair_sentences)))
    np.testing.assert_allclose(whitening.mean, expected.mean, rtol=1e-6)
    np.testing.assert_allclose(whitening.eigenvalues, expected.eigenvalues, rtol=1e-4, atol=1e-9)

    vectors_path = tmp_path / "v.npy"
    assert run("encode", "--model", model, "--whitening", whitening_path, "--output", vectors_path, sentences) == 0
    vectors = np.load(vectors_path)
    assert vectors.shape == (50, 24) and vectors.dtype == np.float32
    reference = whitening.transform(encode(encoder, MANY[:50]).astype(np.float64))
    np.testing.assert_allclose(vectors, reference, atol=1e-4)

    assert (
        run(
            "encode",
            "--model",
            model,
            "--whitening",
            whitening_path,
            "--n-components",
            6,
            "--output",
            vectors_path,
            sentences,
        )
        == 0
    )
    np.testing.assert_allclose(
        np.load(vectors_path), whitening.transform(encode(encoder, MANY[:50]).astype(np.float64), 6), atol=1e-4
    )


def test_rank_deficient_fit_keeps_the_supported_dimensions_and_refuses_more(files, tiny_model, caplog):
    tmp_path, sentences, _ = files
    few = tmp_path / "few.txt"
    few.write_text("".join(s + "\n" for s in MANY[:12]), encoding="utf-8")  # 12 < 24 dims
    output, vectors = tmp_path / "w.npz", tmp_path / "v.npy"
    assert run("fit", "--model", tiny_model[0], "--n-components", 12, "--output", output, few) == 1
    assert "n_components 12 is larger than the rank 11" in caplog.text and not output.exists()
    assert run("fit", "--model", tiny_model[0], "--output", output, few) == 0
    assert Whitening.load(str(output)).rank == 11
    assert run("encode", "--model", tiny_model[0], "--whitening", output, "--output", vectors, few) == 0
    assert np.load(vectors).shape == (12, 11)
    assert "keeps the 11 dimensions the covariance supports, not all 24" in caplog.text
    assert (
        run(
            "encode",
            "--model",
            tiny_model[0],
            "--whitening",
            output,
            "--n-components",
            -1,
            "--allow-rank-deficient",
            "--output",
            vectors,
            few,
        )
        == 0
    )
    assert np.load(vectors).shape == (12, 24) and np.isfinite(np.load(vectors)).all()


def test_a_fit_the_data_cannot_give_names_the_data(tiny_model, tmp_path, caplog):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n")  # three empty sentences: one vector three times
    assert run("fit", "--model", tiny_model[0], "--output", tmp_path / "w.npz", blank) == 1
    assert caplog.messages[-1] == "%s: all 3 vectors are identical: nothing to whiten" % blank

"""The front door: `SentenceEncoder` load, fit, encode, save and load again, against the numpy
whitening of the same pooled vectors."""

import numpy as np
import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.encoding import encode
from bert_whitening.whitening import WhiteningStats, fit_whitening, transform_and_normalize

from helpers import SENTENCES


@pytest.fixture(scope="module")
def fitted(tiny_model):
    encoder = SentenceEncoder.load(tiny_model[0])
    whitening = encoder.fit(SENTENCES * 3, n_components=12)
    return encoder, whitening


def test_fit_then_encode_is_the_numpy_whitening_of_the_pooled_vectors(fitted, encoders):
    encoder, whitening = fitted
    pooled = encode(encoders["first-last-avg"], SENTENCES * 3).astype(np.float64)
    reference = fit_whitening(WhiteningStats().update(pooled))
    np.testing.assert_allclose(whitening.mean, reference.mean, atol=1e-6)
    expected = transform_and_normalize(pooled[: len(SENTENCES)], reference.kernel[:, :12], reference.bias)
    actual = encoder.encode(SENTENCES)
    assert actual.shape == (len(SENTENCES), 12) and encoder.dim == 12
    # eigenvector signs are fixed by the fit, so columns agree up to round-off
    np.testing.assert_allclose(np.abs(actual), np.abs(expected), atol=1e-4)
    np.testing.assert_allclose(actual @ actual.T, expected @ expected.T, atol=1e-5)


def test_save_and_load_give_the_same_encoder(fitted, tmp_path):
    encoder, _ = fitted
    encoder.save(str(tmp_path / "saved"))
    again = SentenceEncoder.load(str(tmp_path / "saved"))
    assert again.config.differences(encoder.config.to_config()) == []
    np.testing.assert_allclose(again.encode(SENTENCES[:5]), encoder.encode(SENTENCES[:5]), atol=1e-6)
    with pytest.raises(ValueError, match="already exists"):
        encoder.save(str(tmp_path / "saved"))


def test_encode_file_writes_one_row_per_line(fitted, tmp_path):
    encoder, _ = fitted
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert encoder.encode_file(str(lines), str(tmp_path / "v.npy")) == len(SENTENCES)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), encoder.encode(SENTENCES), atol=1e-6)


def test_load_refuses_what_does_not_fit_before_building(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="maxlen 100 is larger than the 64 positions"):
        SentenceEncoder.load(tiny_model[0], maxlen=100)
    with pytest.raises(ValueError, match="n_components 5 needs a whitening"):
        SentenceEncoder.load(tiny_model[0], n_components=5)

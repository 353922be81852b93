"""Codes of unit vectors (`bert_whitening.codes`) and the whitening that carries them. Each
expected value is computed here another way: +-1 vectors for binary, float cosines for int8,
the sample itself for the scales."""

import numpy as np
import pytest

from bert_whitening.codes import CLIP, INT8_MAX, bytes_per_vector, code_list, int8_steps, quantizer
from bert_whitening.errors import BertWhiteningError, WhiteningError
from bert_whitening.sentence_transformers_names import quantized
from bert_whitening.vectors import l2_normalize
from bert_whitening.whitening import FitOptions, Whitening, WhiteningStats, fit_whitening


def unit_rows(n, k, seed=0):
    return l2_normalize(np.random.default_rng(seed).normal(size=(n, k)))


@pytest.mark.parametrize(
    ("codes", "k", "expected"), [("float32", 10, 40), ("int8", 10, 10), ("binary", 10, 2), ("binary", 16, 2)]
)
def test_a_vector_takes_the_bytes_of_its_code(codes, k, expected):
    assert bytes_per_vector(codes, k) == expected
    q = quantizer(codes, k, np.ones(k))
    assert q.encode(unit_rows(3, k)).nbytes == 3 * expected


@pytest.mark.parametrize("k", [1, 7, 8, 13, 64])
def test_binary_cosine_is_the_cosine_of_the_signs(k):
    a, b = unit_rows(20, k, 1), unit_rows(20, k, 2)
    signs_a, signs_b = np.where(a > 0, 1.0, -1.0), np.where(b > 0, 1.0, -1.0)
    expected = (signs_a * signs_b).sum(axis=1) / k
    q = quantizer("binary", k)
    np.testing.assert_allclose(q.cosine_rows(q.encode(a), q.encode(b)), expected, atol=1e-12)
    np.testing.assert_allclose(q.cosine_matrix(q.encode(a), q.encode(b)), signs_a @ signs_b.T / k, atol=1e-12)
    np.testing.assert_allclose(q.values(q.encode(a)) @ q.values(q.encode(b)).T, signs_a @ signs_b.T / k, atol=1e-6)


def test_binary_codes_are_the_bits_sentence_transformers_packs():
    vectors = unit_rows(5, 19)
    bits = (vectors > 0).astype(int)
    expected = [[int("".join(map(str, row[i : i + 8])).ljust(8, "0"), 2) for i in range(0, 19, 8)] for row in bits]
    assert quantizer("binary", 19).encode(vectors).tolist() == expected
    np.testing.assert_array_equal(quantized(vectors, "ubinary"), expected)


def test_int8_cosine_is_the_cosine_of_the_scaled_integers_and_near_the_float_one():
    k, rms = 32, np.linspace(0.5, 2.0, 32)
    a, b = l2_normalize(unit_rows(200, k, 3) * rms), l2_normalize(unit_rows(200, k, 4) * rms)
    q = quantizer("int8", k, rms)
    codes_a, codes_b = q.encode(a), q.encode(b)
    assert codes_a.dtype == np.int8 and np.abs(codes_a).max() <= INT8_MAX
    step = CLIP * rms / (INT8_MAX * np.sqrt((rms**2).sum()))
    scaled_a, scaled_b = codes_a * step, codes_b * step
    expected = (scaled_a * scaled_b).sum(1) / np.linalg.norm(scaled_a, axis=1) / np.linalg.norm(scaled_b, axis=1)
    np.testing.assert_allclose(q.cosine_rows(codes_a, codes_b), expected, atol=1e-6)
    assert np.abs(scaled_a - a).max() <= step.max() / 2 + 1e-12  # nothing clipped here: each within half a step
    np.testing.assert_allclose(q.cosine_rows(codes_a, codes_b), (a * b).sum(1), atol=0.02)


def test_int8_clips_a_coordinate_beyond_its_range_and_a_dimension_of_no_spread_divides_nothing():
    q = quantizer("int8", 100, np.ones(100))  # a coordinate's range is CLIP / sqrt(100) = 0.6
    spike = np.zeros((1, 100))
    spike[0, :2] = [0.8, -0.6]
    assert q.encode(spike)[0, :3].tolist() == [INT8_MAX, -INT8_MAX, 0]
    steps = int8_steps(np.array([0.0, 2.0]))
    assert np.isfinite(steps).all() and steps[0] == steps[1]
    with pytest.raises(BertWhiteningError, match="not all 0"):
        int8_steps(np.zeros(3))


def test_codes_of_another_shape_or_dtype_are_refused_in_one_line():
    q = quantizer("binary", 16)
    with pytest.raises(BertWhiteningError, match=r"expected binary codes of shape \(n, 2\), got int8"):
        q.cosine_rows(np.zeros((1, 2), np.int8), np.zeros((1, 2), np.uint8))
    with pytest.raises(BertWhiteningError, match="need the spread"):
        quantizer("int8", 4)


def test_code_names_are_checked_once():
    assert code_list("float32, int8,binary,int8") == ("float32", "int8", "binary")
    for bad in ("int4", "", ["float16"], 8):
        with pytest.raises(BertWhiteningError):
            code_list(bad)
    with pytest.raises(WhiteningError, match="codes must be one of float32, int8, binary, got 'int4'"):
        FitOptions(codes="int4")


def sample(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(400, 6)) * [5.0, 3.0, 2.0, 1.0, 0.5, 0.1] + [1.0, -2.0, 0, 0, 3.0, 0]


@pytest.mark.parametrize(("beta", "gamma"), [(1.0, 1.0), (0.0, 0.0), (1.0, 0.5), (0.5, 1.0)])
def test_the_int8_scales_are_each_coordinates_spread_over_the_sample(beta, gamma):
    x = sample()
    whitening = fit_whitening(WhiteningStats().update(x), beta=beta, gamma=gamma, codes="int8")
    whitened = (x + whitening.bias) @ whitening.kernel
    np.testing.assert_allclose(whitening.code_scales, np.sqrt((whitened**2).sum(0) / (len(x) - 1)), rtol=1e-9)
    np.testing.assert_allclose(whitening.coordinate_rms(3), whitening.code_scales[:3])
    np.testing.assert_allclose(whitening.coordinate_rms(0), np.sqrt((x**2).mean(0)), rtol=1e-9)


def test_codes_and_their_scales_survive_the_file_and_a_forged_scale_is_refused(tmp_path):
    whitening = fit_whitening(WhiteningStats().update(sample()), codes="int8", n_components=4)
    whitening.save(str(tmp_path / "w.npz"))
    loaded = Whitening.load(str(tmp_path / "w.npz"))
    assert loaded.codes == "int8"
    np.testing.assert_array_equal(loaded.code_scales, whitening.code_scales)
    vectors = loaded.transform(sample(1)[:5])
    assert loaded.quantizer().encode(vectors).tolist() == whitening.quantizer().encode(vectors).tolist()
    whitening.code_scales = -whitening.code_scales
    whitening.save(str(tmp_path / "forged.npz"))
    with pytest.raises(WhiteningError, match="code_scales must be positive"):
        Whitening.load(str(tmp_path / "forged.npz"))
    whitening.code_scales = None
    whitening.save(str(tmp_path / "missing.npz"))
    with pytest.raises(WhiteningError, match="missing code_scales"):
        Whitening.load(str(tmp_path / "missing.npz"))


def test_a_file_without_codes_reads_as_float32_and_unknown_codes_are_refused(tmp_path):
    whitening = fit_whitening(WhiteningStats().update(sample()))
    assert whitening.code_scales is None and whitening.codes == "float32"
    whitening.save(str(tmp_path / "w.npz"))
    assert Whitening.load(str(tmp_path / "w.npz")).quantizer(codes="binary").bytes == 1
    whitening.codes = "int4"
    whitening.save(str(tmp_path / "bad.npz"))
    with pytest.raises(WhiteningError, match="metadata codes"):
        Whitening.load(str(tmp_path / "bad.npz"))

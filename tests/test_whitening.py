"""The numpy whitening against the original formulas (tests/reference.py) and np.cov."""
import logging
import os

import numpy as np
import pytest

from bert_whitening.whitening import (
    Whitening,
    WhiteningStats,
    compute_kernel_bias,
    fit_whitening,
    transform_and_normalize,
)

from reference import original_kernel_bias, original_transform_and_normalize


def correlated(rows, dim=16, seed=0, offset=3.0):
    """Vectors with distinct variances per direction and a large mean, like BERT vectors."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    scales = np.geomspace(5.0, 0.05, dim)
    return (rng.normal(size=(rows, dim)) * scales) @ rotation + offset * rng.normal(size=dim)


def stats_of(*batches):
    stats = WhiteningStats()
    for batch in batches:
        stats.update(batch)
    return stats


def relative_error(actual, expected):
    return np.abs(actual - expected).max() / np.abs(expected).max()


def test_accumulator_equals_np_cov_of_the_concatenation():
    batches = [correlated(n, seed=i, offset=1e3) for i, n in enumerate([1, 7, 300, 2, 64])]
    stats = stats_of(*batches)
    everything = np.concatenate(batches)
    assert stats.count == len(everything)
    assert relative_error(stats.mean, everything.mean(axis=0)) <= 1e-9
    assert relative_error(stats.covariance, np.cov(everything.T)) <= 1e-9


def test_merged_shards_equal_one_pass():
    batches = [correlated(n, seed=i) for i, n in enumerate([50, 3, 120, 33])]
    whole = stats_of(*batches)
    merged = stats_of(*batches[:2]).merge(stats_of(*batches[2:])).merge(WhiteningStats())
    assert merged.count == whole.count
    assert relative_error(merged.mean, whole.mean) <= 1e-12
    assert relative_error(merged.covariance, whole.covariance) <= 1e-12
    empty_first = WhiteningStats().merge(whole)
    assert relative_error(empty_first.covariance, whole.covariance) <= 1e-15


def test_large_batches_are_processed_in_bounded_chunks(monkeypatch):
    monkeypatch.setattr("bert_whitening.whitening.UPDATE_CHUNK_ROWS", 7)
    vectors = correlated(100)
    stats = stats_of(vectors)
    assert relative_error(stats.covariance, np.cov(vectors.T)) <= 1e-9


def test_npy_file_is_read_in_blocks_and_equals_np_cov(tmp_path):
    vectors = correlated(1000, offset=1e3).astype(np.float32)
    path = str(tmp_path / "vectors.npy")
    np.save(path, vectors)
    stats = WhiteningStats().update_from_npy(path, rows=64)
    assert stats.count == 1000
    assert relative_error(stats.mean, vectors.astype(np.float64).mean(axis=0)) <= 1e-9
    assert relative_error(stats.covariance, np.cov(vectors.T)) <= 1e-9


def test_npy_file_errors_name_the_file(tmp_path):
    path = str(tmp_path / "bad.npy")
    np.save(path, np.zeros((3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="bad.npy: expected a 2-D C-ordered array"):
        WhiteningStats().update_from_npy(path)
    np.save(path, np.asfortranarray(correlated(6)))
    with pytest.raises(ValueError, match="in Fortran order"):
        WhiteningStats().update_from_npy(path)
    vectors = correlated(10)
    vectors[8, 1] = np.nan
    np.save(path, vectors)
    with pytest.raises(ValueError, match="bad.npy: vector 8 "):
        WhiteningStats().update_from_npy(path, rows=3)


@pytest.mark.parametrize("k", [0, -1, 16, 5])
def test_kernel_and_transform_match_the_original(k):
    vecs = [correlated(200, seed=1), correlated(150, seed=2)]
    kernel, bias = compute_kernel_bias(vecs)
    ref_kernel, ref_bias = original_kernel_bias(vecs)
    np.testing.assert_allclose(bias.ravel(), ref_bias.ravel(), rtol=1e-12)
    # Eigenvectors are defined up to sign: columns must agree up to sign.
    signs = np.sign((kernel * ref_kernel).sum(axis=0))
    np.testing.assert_allclose(kernel * signs, ref_kernel, rtol=1e-7, atol=1e-9)
    x = vecs[0]
    if k == 0:
        ours, reference = transform_and_normalize(x), original_transform_and_normalize(x)
    else:
        cols = slice(None) if k < 0 else slice(0, k)
        ours = transform_and_normalize(x, kernel[:, cols], bias) * signs[cols]
        reference = original_transform_and_normalize(x, ref_kernel[:, cols], ref_bias)
    np.testing.assert_allclose(ours, reference, atol=1e-9)
    whitening = fit_whitening(stats_of(*vecs))
    np.testing.assert_allclose(whitening.transform(x, k) * (signs[cols] if k else 1), reference,
                               atol=1e-9)


def test_beta_gamma_zero_is_a_rotation_with_truncation():
    x = correlated(300)
    whitening = fit_whitening(stats_of(x), beta=0.0, gamma=0.0)
    np.testing.assert_allclose(whitening.bias, 0.0)
    np.testing.assert_allclose(whitening.kernel.T @ whitening.kernel, np.eye(16), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(x @ whitening.kernel, axis=1),
                               np.linalg.norm(x, axis=1), rtol=1e-12)


def test_beta_gamma_interpolate_the_original_formula():
    x = correlated(300)
    stats = stats_of(x)
    beta, gamma = 0.5, 0.3
    half = fit_whitening(stats, beta=beta, gamma=gamma)
    full = fit_whitening(stats)
    s = full.eigenvalues
    rotation = full.kernel * np.sqrt(s)  # U
    np.testing.assert_allclose(half.kernel, rotation * s ** (-gamma / 2), rtol=1e-9)
    np.testing.assert_allclose(half.bias, -beta * x.mean(axis=0), rtol=1e-12)


def test_whitened_vectors_have_identity_covariance():
    x = correlated(500)
    whitening = fit_whitening(stats_of(x))
    y = (x + whitening.bias) @ whitening.kernel
    np.testing.assert_allclose(np.cov(y.T), np.eye(16), atol=1e-9)
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-9)


def test_kernel_does_not_depend_on_batch_order():
    x = correlated(400)
    one = fit_whitening(stats_of(x))
    other = fit_whitening(stats_of(x[::-1][:150], x[::-1][150:]))
    np.testing.assert_allclose(one.kernel, other.kernel, rtol=1e-6, atol=1e-9)


def test_rank_deficient_data_is_floored_warned_and_k_above_rank_refused(caplog):
    x = correlated(10)  # 10 vectors in 16 dimensions: rank 9
    with caplog.at_level(logging.WARNING):
        whitening = fit_whitening(stats_of(x))
    assert whitening.rank == 9
    assert "rank 9" in caplog.text and "floored" in caplog.text
    assert np.isfinite(whitening.kernel).all()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert whitening.transform(x).shape == (10, 9)  # all = the 9 supported directions
    assert "keeps the 9 dimensions the covariance supports, not all 16" in caplog.text
    np.testing.assert_allclose(whitening.transform(x), whitening.transform(x, 9))
    for refused in (lambda: whitening.transform(x, 10),
                    lambda: fit_whitening(stats_of(x), n_components=12)):
        with pytest.raises(ValueError, match="n_components 1[02] is larger than the rank 9"):
            refused()
    allowed = whitening.transform(x, -1, allow_rank_deficient=True)
    assert allowed.shape == (10, 16) and np.isfinite(allowed).all()


def test_k_larger_than_dimension_is_refused():
    whitening = fit_whitening(stats_of(correlated(100)))
    with pytest.raises(ValueError, match="larger than the vector dimension 16"):
        whitening.transform(correlated(3), 17)


def test_nan_and_inf_name_the_row():
    stats = stats_of(correlated(5))
    bad = correlated(4)
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="vector 7 "):
        stats.update(bad)
    bad[2, 3] = np.inf
    with pytest.raises(ValueError, match="vector 7 "):
        WhiteningStats().update(np.concatenate([correlated(5), bad]))


def test_too_few_or_identical_vectors_are_refused():
    with pytest.raises(ValueError, match="at least 2 vectors"):
        fit_whitening(stats_of(correlated(1)))
    with pytest.raises(ValueError, match="identical"):
        fit_whitening(stats_of(np.ones((5, 16))))
    with pytest.raises(ValueError, match="dimension 8"):
        stats_of(correlated(5)).update(np.zeros((2, 8)))


def test_save_and_load_round_trip(tmp_path):
    whitening = fit_whitening(stats_of(correlated(100)), n_components=8, beta=0.9, gamma=0.8,
                              pooling="last-avg", model={"name": "tiny", "hidden_size": 16})
    path = str(tmp_path / "w.npz")
    whitening.save(path)
    loaded = Whitening.load(path)
    for name in ("kernel", "bias", "mean", "eigenvalues"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(whitening, name))
    for name in ("rank", "count", "n_components", "beta", "gamma", "pooling", "model"):
        assert getattr(loaded, name) == getattr(whitening, name)
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not 0600


def test_load_names_what_is_wrong(tmp_path):
    whitening = fit_whitening(stats_of(correlated(100)))
    path = str(tmp_path / "w.npz")
    whitening.save(path)
    with np.load(path) as data:
        arrays = dict(data)
    broken = str(tmp_path / "broken.npz")
    np.savez(broken, **{**arrays, "bias": arrays["bias"][:5]})
    with pytest.raises(ValueError, match=r"broken.npz: bias has shape \(5,\), expected \(16,\)"):
        Whitening.load(broken)
    del arrays["kernel"]
    np.savez(broken, **arrays)
    with pytest.raises(ValueError, match="broken.npz: not a whitening file, missing kernel"):
        Whitening.load(broken)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(ValueError, match="text.npz: not a readable whitening"):
        Whitening.load(str(text))
    with pytest.raises(ValueError, match="nothing.npz"):
        Whitening.load(str(tmp_path / "nothing.npz"))


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    whitening = fit_whitening(stats_of(correlated(100)))

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", explode)
    with pytest.raises(OSError, match="disk full"):
        whitening.save(str(tmp_path / "w.npz"))
    assert list(tmp_path.iterdir()) == []

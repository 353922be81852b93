"""The numpy whitening against the original formulas (tests/reference.py) and np.cov."""

import dataclasses
import json
import logging
import os
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bert_whitening.errors import BertWhiteningError, WhiteningError
from bert_whitening.whitening import (
    FitOptions,
    Whitening,
    WhiteningStats,
    compute_kernel_bias,
    fit_reported,
    fit_whitening,
    transform_and_normalize,
)

from helpers import relative_error
from reference import original_kernel_bias, original_transform_and_normalize, su_9079_kernel, su_9079_whitening


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


@st.composite
def sharded_vectors(draw):
    """Vectors (any values, any mean) and cut points splitting them into shards, some empty."""
    rows, dim = draw(st.integers(2, 40)), draw(st.integers(1, 6))
    values = draw(arrays(np.float64, (rows, dim), elements=st.floats(-1e3, 1e3)))
    offset = draw(arrays(np.float64, dim, elements=st.floats(-1e4, 1e4)))
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=6)))
    return values + offset, cuts


def assert_statistics_of(stats, vectors):
    scale = np.abs(vectors).max() ** 2 + 1.0
    assert stats.count == len(vectors) and stats.dim == vectors.shape[1]
    np.testing.assert_allclose(stats.mean, vectors.mean(axis=0), rtol=1e-12, atol=1e-12 * scale**0.5)
    np.testing.assert_allclose(
        stats.covariance, np.cov(vectors.T).reshape(stats.dim, stats.dim), rtol=1e-9, atol=1e-9 * scale
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sharded_vectors(), st.randoms(use_true_random=False))
def test_any_split_into_shards_merges_to_the_statistics_of_one_pass(data, random):
    vectors, cuts = data
    shards = np.split(vectors, cuts)
    assert_statistics_of(stats_of(*shards), vectors)  # one accumulator, batch after batch
    parts = [stats_of(shard) for shard in shards]
    while len(parts) > 1:  # merged in a random order and grouping
        first = parts.pop(random.randrange(len(parts)))
        second = parts.pop(random.randrange(len(parts)))
        parts.append(first.merge(second))
    assert_statistics_of(parts[0], vectors)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(sharded_vectors(), st.floats(-2.0, 2.0))
def test_second_moment_is_the_scatter_around_beta_times_the_mean(data, beta):
    vectors, cuts = data
    shifted = vectors - beta * vectors.mean(axis=0)
    scale = np.abs(vectors).max() ** 2 + 1.0
    np.testing.assert_allclose(
        stats_of(*np.split(vectors, cuts)).second_moment(beta),
        shifted.T @ shifted / (len(vectors) - 1),
        rtol=1e-9,
        atol=1e-9 * scale,
    )


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
    with pytest.raises(ValueError, match="bad.npy: expected a 2-D array of vectors"):
        WhiteningStats().update_from_npy(path)
    np.save(path, np.asfortranarray(correlated(6)))
    with pytest.raises(ValueError, match="in Fortran order"):
        WhiteningStats().update_from_npy(path)
    vectors = correlated(10)
    vectors[8, 1] = np.nan
    np.save(path, vectors)
    with pytest.raises(ValueError, match=r"bad.npy: row 8 \(0-based\): the vector holds nan \(column 1\)$"):
        WhiteningStats().update_from_npy(path, rows=3)
    for kind in (np.complex64, np.int64):
        np.save(path, correlated(6).astype(kind))
        with pytest.raises(ValueError, match="bad.npy: holds %s, expected floating-point" % np.dtype(kind)):
            WhiteningStats().update_from_npy(path)
    with open(path, "wb") as stream:  # a header of negative size
        np.lib.format.write_array_header_1_0(stream, {"descr": "<f4", "fortran_order": False, "shape": (-5, 4)})
    with pytest.raises(ValueError, match="bad.npy: not a readable .npy array"):
        WhiteningStats().update_from_npy(path)


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
    np.testing.assert_allclose(whitening.transform(x, k) * (signs[cols] if k else 1), reference, atol=1e-9)


def test_beta_gamma_zero_is_a_rotation_with_truncation():
    x = correlated(300)
    whitening = fit_whitening(stats_of(x), beta=0.0, gamma=0.0)
    np.testing.assert_allclose(whitening.bias, 0.0)
    np.testing.assert_allclose(whitening.kernel.T @ whitening.kernel, np.eye(16), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(x @ whitening.kernel, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)


@pytest.mark.parametrize("k", [None, 5])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_beta_gamma_follow_kexue_9079(beta, gamma, k):
    x = correlated(300, offset=20.0)  # a mean large against the spread, as BERT vectors have
    whitening = fit_whitening(stats_of(x[:100], x[100:]), beta=beta, gamma=gamma)
    expected, kernel, eigenvalues = su_9079_whitening(x, beta, gamma, k)
    n = len(x)
    cols = slice(0, k)
    signs = np.sign((whitening.kernel[:, cols] * kernel).sum(axis=0))  # eigenvectors up to sign
    # Sigma_beta over N - 1 (np.cov's, so beta = 1 is the original) is 9079's over N times
    # N / (N - 1): the same eigenvectors, every column of the kernel scaled alike.
    np.testing.assert_allclose(whitening.eigenvalues, eigenvalues * n / (n - 1), rtol=1e-9)
    np.testing.assert_allclose(
        whitening.kernel[:, cols] * signs,
        kernel * (n / (n - 1)) ** (-gamma / 2),
        rtol=1e-7,
        atol=1e-9 * np.abs(kernel).max(),
    )
    np.testing.assert_allclose(whitening.bias, -beta * x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(whitening.transform(x, k or -1) * signs, expected, atol=1e-9)
    assert whitening.beta == beta and whitening.gamma == gamma


def test_beta_zero_decomposes_the_second_moment_not_the_covariance():
    x = correlated(300, offset=20.0)
    raw = fit_whitening(stats_of(x), beta=0.0, gamma=0.0)
    covariance = fit_whitening(stats_of(x), beta=1.0, gamma=0.0)
    second_moment_axis = np.linalg.eigh(x.T @ x)[1][:, -1]
    assert abs(raw.kernel[:, 0] @ second_moment_axis) > 1 - 1e-9
    assert abs(covariance.kernel[:, 0] @ second_moment_axis) < 0.9


def test_eigenvector_signs_are_fixed_largest_entry_positive():
    x = correlated(300, offset=20.0)
    for beta in (0.0, 1.0):
        stats = stats_of(x)
        raw_vectors = np.linalg.eigh(stats.second_moment(beta))[1]
        raw_pivots = raw_vectors[np.argmax(np.abs(raw_vectors), axis=0), np.arange(16)]
        assert (raw_pivots < 0).any()  # numpy's signs need the fixing on this data
        kernel = fit_whitening(stats, beta=beta).kernel
        pivots = kernel[np.argmax(np.abs(kernel), axis=0), np.arange(16)]
        assert (pivots > 0).all(), pivots


def test_float32_round_off_of_a_layer_norm_output_is_below_the_rank_floor(caplog):
    """A LayerNorm output lies on a hyperplane ``w . x = c``: its covariance has a null direction,
    which float32 rounding of vectors with a large mean lifts far above float64's tolerance
    (``eps64 * dim``) but not above float32's variance floor. Sigma_beta for beta < 1 keeps
    that direction (``c != 0``), so it has full rank."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 16)) * np.geomspace(3, 0.3, 16)
    z = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)
    x = (z * (1 + 0.3 * rng.normal(size=16)) + 100 * rng.normal(size=16)).astype(np.float32)
    stats = stats_of(x)
    eigenvalues = np.linalg.eigvalsh(stats.covariance)
    assert eigenvalues[0] > 10 * 16 * np.finfo(np.float64).eps * eigenvalues[-1]
    with caplog.at_level(logging.WARNING):
        assert fit_whitening(stats).rank == 15
    assert "rank 15; 1 eigenvalues" in caplog.text
    assert [fit_whitening(stats, beta=beta).rank for beta in (0.0, 0.5)] == [16, 16]


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
    for refused in (lambda: whitening.transform(x, 10), lambda: fit_whitening(stats_of(x), n_components=12)):
        with pytest.raises(ValueError, match="n_components 1[02] is larger than the rank 9"):
            refused()
    allowed = whitening.transform(x, -1, allow_rank_deficient=True)
    assert allowed.shape == (10, 16) and np.isfinite(allowed).all()


def test_k_larger_than_dimension_is_refused():
    whitening = fit_whitening(stats_of(correlated(100)))
    with pytest.raises(ValueError, match="larger than the vector dimension 16"):
        whitening.transform(correlated(3), 17)


def test_nan_and_inf_name_the_callers_row(tmp_path):
    """The row of the batch (from ``start``), not of the accumulator: 5 vectors added before
    made the third row of this batch 'vector 7', and update_from_npy named no row of its file."""
    stats = stats_of(correlated(5))
    bad = correlated(4)
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"^the batch: row 2 \(0-based\): the vector holds nan \(column 3\)$"):
        stats.update(bad)
    with pytest.raises(ValueError, match=r"^v.npy: row 12 \(0-based\): the vector holds nan"):
        stats.update(bad, "v.npy", 10)
    bad[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"^the batch: row 7 \(0-based\): the vector holds inf"):
        WhiteningStats().update(np.concatenate([correlated(5), bad]))
    path = str(tmp_path / "v.npy")
    np.save(path, np.concatenate([correlated(8), bad]))
    with pytest.raises(ValueError, match=r"^%s: row 10 \(0-based\): the vector holds inf" % re.escape(path)):
        stats.update_from_npy(path, rows=3)  # the file's row 10, not the accumulator's 15


def test_too_few_or_identical_vectors_are_refused():
    with pytest.raises(ValueError, match="at least 2 vectors"):
        fit_whitening(stats_of(correlated(1)))
    with pytest.raises(ValueError, match="identical"):
        fit_whitening(stats_of(np.ones((5, 16))))
    with pytest.raises(ValueError, match="dimension 8"):
        stats_of(correlated(5)).update(np.zeros((2, 8)))


def test_save_and_load_round_trip(tmp_path):
    whitening = fit_whitening(
        stats_of(correlated(100)),
        n_components=8,
        beta=0.9,
        gamma=0.8,
        pooling="last-avg",
        model_identity={"name": "tiny", "hidden_size": 16},
    )
    path = str(tmp_path / "w.npz")
    whitening.save(path)
    loaded = Whitening.load(path)
    for name in ("kernel", "bias", "mean", "eigenvalues"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(whitening, name))
    for name in ("rank", "count", "n_components", "beta", "gamma", "pooling", "model_identity"):
        assert getattr(loaded, name) == getattr(whitening, name)
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not 0600


def rewrite_meta(path, **changes):
    with np.load(path) as data:
        arrays = dict(data)
    meta = json.loads(str(arrays["meta"]))
    meta.update(changes)
    np.savez(path, **{**arrays, "meta": np.array(json.dumps(meta))})


def test_version_1_files_load_when_beta_is_1_and_are_refused_otherwise(tmp_path):
    """Version 1 decomposed the covariance whatever beta: the same kernel as now for beta = 1."""
    stats = stats_of(correlated(100, offset=20.0))
    original = fit_whitening(stats, gamma=0.5)
    path = str(tmp_path / "old.npz")
    original.save(path)
    rewrite_meta(path, format_version=1)
    np.testing.assert_array_equal(Whitening.load(path).kernel, original.kernel)
    fit_whitening(stats, beta=0.5).save(path)
    rewrite_meta(path, format_version=1)
    with pytest.raises(ValueError, match="old.npz: format version 1 with beta 0.5: .* fit it again"):
        Whitening.load(path)
    rewrite_meta(path, format_version=3)
    with pytest.raises(ValueError, match="old.npz: format version 3, this version reads 1"):
        Whitening.load(path)


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


def documented_floor(x):
    """The rank floor as the module documents it, from np.cov and numpy's eigenvalues, for
    vectors ``x`` whose dtype is their precision."""
    x64 = x.astype(np.float64)
    eigenvalues = np.linalg.eigvalsh(np.cov(x64.T))
    mean_squared_norm = (x64**2).sum(axis=1).mean()
    return max(
        np.finfo(np.float64).eps * x.shape[1] * eigenvalues.max(), np.finfo(x.dtype).eps ** 2 * mean_squared_norm
    )


@pytest.mark.parametrize(
    "x,rank,cause",
    [
        # float32 round-off term: float32 vectors, a mean large against the spread, dimension 16
        (
            correlated(10).astype(np.float32),
            9,
            "the variance rounding to the vectors' precision, machine epsilon 1.19e-07, gives them",
        ),
        # float64 term: dimension 128 (above 64 it can dominate), largest eigenvalue below 1
        (
            np.random.default_rng(3).normal(size=(100, 128)) * np.r_[0.5, np.geomspace(0.05, 5e-4, 127)],
            99,
            "what float64's eigen-decomposition resolves beside the largest eigenvalue, %.3g",
        ),
    ],
)
def test_the_rank_warning_gives_the_documented_floor_and_the_smallest_eigenvalue(caplog, x, rank, cause):
    with caplog.at_level(logging.WARNING):
        whitening = fit_whitening(stats_of(x))
    dim = x.shape[1]
    assert whitening.rank == rank
    floor = "%.3g" % documented_floor(x)
    assert "%.3g" % whitening.floor == floor
    assert caplog.messages == [
        "Sigma_beta (beta 1) of %d vectors of dimension %d has rank %d; %d eigenvalues at or below "
        "%s (smallest %.3g) are floored to %s (%s)"
        % (
            len(x),
            dim,
            rank,
            dim - rank,
            floor,
            whitening.eigenvalues.min(),
            floor,
            cause.replace("%.3g", "%.3g" % whitening.eigenvalues[0]),
        )
    ]


def test_full_rank_data_gives_no_warning(caplog):
    with caplog.at_level(logging.WARNING):
        whitening = fit_whitening(stats_of(correlated(100)))
        assert whitening.components(-1) == 16 and whitening.components(0) == 0
    assert caplog.messages == []


@pytest.mark.parametrize(
    "rows, n_components, warned",
    [(31, -1, True), (32, -1, False), (31, 15, False), (29, 15, True), (10, -1, False)],
    ids=["all, one short", "all, two a component", "k, enough", "k, one short", "rank deficient: its own warning"],
)
def test_fitting_on_fewer_than_two_sentences_a_component_is_warned_of(caplog, rows, n_components, warned):
    """300 sentences for 256 components fitted without a word: the smallest kept variances come
    out several times too small, and whitening scales their directions up as much."""
    with caplog.at_level(logging.WARNING):
        fit_reported(stats_of(correlated(rows)), "few.txt", FitOptions(n_components), allow_rank_deficient=True)
    said = [message.split(",")[0] for message in caplog.messages if "sentences for" in message]
    k = 16 if n_components < 0 else n_components
    assert said == (
        ["few.txt: %d sentences for %d components: with fewer than 2 a component" % (rows, k)] if warned else []
    )
    assert warned or rows > 16 or "has rank" in caplog.text


def test_rank_rules_with_the_default_arguments(caplog):
    from bert_whitening.whitening import resolve_components

    whitening = fit_whitening(stats_of(correlated(10)))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert whitening.components(0) == 0 and resolve_components(0, 16, 9) == 0  # no whitening
        assert resolve_components(5, 16, 9) == 5 and resolve_components(-1, 16) == 16
    assert caplog.messages == []
    for refused in (lambda: whitening.components(10), lambda: resolve_components(10, 16, 9)):
        with pytest.raises(ValueError, match="n_components 10 is larger than the rank 9"):
            refused()
    with caplog.at_level(logging.WARNING):
        assert resolve_components(-1, 16, 9) == 9
    assert caplog.messages == [
        "n_components -1 (all) keeps the 9 dimensions the covariance supports, not all 16: the "
        "rest are round-off noise (--allow-rank-deficient keeps them)"
    ]
    allowed = fit_whitening(stats_of(correlated(10)), n_components=12, allow_rank_deficient=True)
    assert allowed.n_components == 12 and allowed.components(allow_rank_deficient=True) == 12


def raised(action):
    with pytest.raises(ValueError) as info:
        action()
    return str(info.value)


def test_error_messages_in_full(tmp_path):
    sixteen = stats_of(correlated(5))
    assert raised(lambda: WhiteningStats().update(np.zeros(3))) == (
        "the batch: expected a 2-D array of vectors (one a row, at least one column), got shape (3,)"
    )
    assert (
        raised(lambda: WhiteningStats(16).update(np.zeros((2, 8))))
        == "the batch: vectors of dimension 8, the statistics have 16"
    )
    assert raised(lambda: sixteen.merge(stats_of(np.zeros((2, 8))))) == "cannot merge statistics of dimension 16 and 8"
    assert raised(lambda: stats_of(correlated(1)).second_moment(0.0)) == "a covariance needs at least 2 vectors, got 1"
    assert raised(lambda: fit_whitening(stats_of(np.ones((5, 16))))) == "all 5 vectors are identical: nothing to whiten"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warning is not the message
        overflow = raised(lambda: fit_whitening(sixteen, beta=1e300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's overflow in the accumulation itself
        huge = stats_of(correlated(5) * 1e160)
    assert raised(lambda: fit_whitening(huge)).startswith("the vectors are too large: their scatter around the mean")
    assert re.fullmatch(
        r"beta 1e\+300: Sigma_beta overflows float64 \(the shift \(1 - beta\) \* mean reaches "
        r"\S+\); choose a beta nearer 1",
        overflow,
    ), overflow
    assert (
        raised(lambda: fit_whitening(sixteen).transform(correlated(2), 17))
        == "n_components 17 is larger than the vector dimension 16"
    )
    assert raised(lambda: fit_whitening(sixteen, n_components=5)) == (
        "n_components 5 is larger than the rank 4 of the covariance: the extra directions hold "
        "only round-off noise, which whitening would blow up. Fit on more sentences (at least "
        "dimension + 1), choose n_components <= 4, or allow it explicitly (allow_rank_deficient / "
        "--allow-rank-deficient)"
    )
    bad = correlated(4)
    bad[2, 3] = np.inf
    assert (
        raised(lambda: stats_of(correlated(5)).update(bad))
        == "the batch: row 2 (0-based): the vector holds inf (column 3)"
    )

    npy = str(tmp_path / "v.npy")
    np.save(npy, np.zeros((3, 4, 5)))
    assert (
        raised(lambda: WhiteningStats().update_from_npy(npy))
        == "%s: expected a 2-D array of vectors (one a row, at least one column), got shape (3, 4, 5)" % npy
    )
    np.save(npy, np.asfortranarray(correlated(6)))
    assert (
        raised(lambda: WhiteningStats().update_from_npy(npy))
        == "%s: expected a 2-D C-ordered array of vectors, got shape (6, 16) in Fortran order" % npy
    )
    np.save(npy, bad)
    assert (
        raised(lambda: WhiteningStats().update_from_npy(npy, rows=2))
        == "%s: row 2 (0-based): the vector holds inf (column 3)" % npy
    )

    path = str(tmp_path / "w.npz")
    fit_whitening(stats_of(correlated(100))).save(path)
    with np.load(path) as data:
        arrays = dict(data)
    broken = str(tmp_path / "broken.npz")
    np.savez(broken, **{**arrays, "bias": arrays["bias"][:5]})
    assert raised(lambda: Whitening.load(broken)) == "%s: bias has shape (5,), expected (16,)" % broken
    np.savez(broken, **{**arrays, "kernel": arrays["kernel"] * np.nan})
    assert raised(lambda: Whitening.load(broken)) == "%s: kernel contains NaN or inf" % broken
    np.savez(broken, meta=arrays["meta"], bias=arrays["bias"], mean=arrays["mean"])
    assert raised(lambda: Whitening.load(broken)) == "%s: not a whitening file, missing eigenvalues, kernel" % broken
    assert (
        raised(lambda: Whitening.load(npy))
        == "%s: not a readable whitening file (not an .npz archive: File is not a zip file)" % npy
    )
    rewrite_meta(path, format_version=1, beta=0.5)
    assert raised(lambda: Whitening.load(path)) == (
        "%s: format version 1 with beta 0.5: its kernel decomposes the covariance around the "
        "mean, not Sigma_beta of kexue.fm/archives/9079 as version 2 does; fit it again" % path
    )
    rewrite_meta(path, format_version=3)
    assert raised(lambda: Whitening.load(path)) == "%s: format version 3, this version reads 1 (beta = 1) and 2" % path


@pytest.mark.parametrize("shape,accepted", [((1, 16), True), ((5, 1), True), ((2, 16), False), ((5, 2), False)])
def test_fortran_order_is_refused_only_where_it_differs_from_c_order(tmp_path, shape, accepted):
    vectors = np.asfortranarray(np.arange(np.prod(shape), dtype=np.float64).reshape(shape))
    path = str(tmp_path / "v.npy")
    np.save(path, vectors)
    if accepted:
        stats = WhiteningStats().update_from_npy(path)
        np.testing.assert_array_equal(stats.mean, vectors.mean(axis=0))
    else:
        with pytest.raises(ValueError, match="in Fortran order"):
            WhiteningStats().update_from_npy(path)


def test_compute_kernel_bias_takes_one_array_and_beta_gamma():
    x = correlated(200, offset=20.0)
    np.testing.assert_allclose(compute_kernel_bias(x)[0], compute_kernel_bias([x[:50], x[50:]])[0], rtol=1e-8)
    kernel, bias = compute_kernel_bias(x, beta=0.0, gamma=0.5)
    shift, expected, _ = su_9079_kernel(x, 0.0, 0.5)
    n = len(x)
    signs = np.sign((kernel * expected).sum(axis=0))
    np.testing.assert_allclose(
        kernel * signs, expected * (n / (n - 1)) ** -0.25, rtol=1e-7, atol=1e-9 * np.abs(expected).max()
    )
    np.testing.assert_array_equal(bias, -shift)


def test_normalisation_leaves_zero_vectors_at_zero_and_needs_kernel_and_bias():
    from bert_whitening.vectors import l2_normalize

    vectors = np.array([[0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_array_equal(l2_normalize(vectors), [[0.0, 0.0], [0.6, 0.8]])
    np.testing.assert_array_equal(transform_and_normalize(vectors, None, np.ones(2)), l2_normalize(vectors))
    np.testing.assert_array_equal(transform_and_normalize(vectors, np.eye(2), None), l2_normalize(vectors))


def test_fit_records_what_it_was_fitted_on():
    stats = stats_of(correlated(100))
    bare = fit_whitening(stats)
    assert (bare.pooling, bare.model_identity, bare.count, bare.n_components) == ("", {}, 100, -1)
    named = fit_whitening(stats, n_components=8, pooling="cls", model_identity={"name": "tiny"})
    assert (named.pooling, named.model_identity, named.n_components) == ("cls", {"name": "tiny"}, 8)
    preset = WhiteningStats(16)
    assert preset.dim == 16 and preset.mean.shape == (16,) and preset.scatter.shape == (16, 16)


@pytest.mark.parametrize(
    "options, fragment",
    [
        (dict(gamma=-1000.0), "gamma -1000 makes the kernel zero (underflow)"),
        (dict(gamma=1000.0), "gamma 1000 makes the kernel infinite (overflow)"),
        (dict(gamma=40.0), "gamma 40 makes the kernel's scales span"),
        (dict(beta=1e12), "beta 1e+12 makes Sigma_beta's largest eigenvalue"),
    ],
)
def test_betas_and_gammas_that_make_a_degenerate_whitening_are_refused(options, fragment):
    vectors = np.random.default_rng(0).normal(size=(200, 8)) * np.logspace(0, -3, 8) + 5
    with pytest.raises(WhiteningError, match=re.escape(fragment)):
        fit_whitening(WhiteningStats().update(vectors), **options)


@pytest.mark.parametrize(
    "options", [dict(), dict(beta=0.0), dict(gamma=0.0), dict(gamma=0.5), dict(beta=0.0, gamma=0.0), dict(rows=5)]
)
def test_every_whitening_the_package_fits_passes_its_own_load_checks(tmp_path, options):
    rows = options.pop("rows", 200)  # 5 rows of dimension 8: rank-deficient, floored
    vectors = np.random.default_rng(1).normal(size=(rows, 8)) * np.logspace(0, -2, 8) + 3
    fitted = fit_whitening(WhiteningStats().update(vectors), **options)
    fitted.save(str(tmp_path / "w.npz"))
    np.testing.assert_array_equal(Whitening.load(str(tmp_path / "w.npz")).kernel, fitted.kernel)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda w: dataclasses.replace(w, kernel=np.zeros_like(w.kernel)), "kernel column 0 is zero"),
        (lambda w: dataclasses.replace(w, kernel=np.ascontiguousarray(w.kernel.T)), "are not orthogonal"),
        (lambda w: dataclasses.replace(w, kernel=w.kernel * 2), "has squared norm"),
        (lambda w: dataclasses.replace(w, eigenvalues=w.eigenvalues[::-1].copy()), "is smaller than eigenvalue 1"),
        (lambda w: dataclasses.replace(w, eigenvalues=w.eigenvalues * [1, 1, 1, 1, 1, 0.5]), "has squared norm"),
        (  # columns and eigenvalues reversed together, consistent: n_components would keep the least variance
            lambda w: dataclasses.replace(
                w, kernel=np.ascontiguousarray(w.kernel[:, ::-1]), eigenvalues=w.eigenvalues[::-1].copy()
            ),
            "eigenvalue 0 (",
        ),
        (lambda w: dataclasses.replace(w, bias=w.bias + 1), "bias is not -beta * mean"),
    ],
)
def test_a_whitening_file_that_disagrees_with_its_own_claims_is_refused(tmp_path, edit, fragment):
    vectors = np.random.default_rng(2).normal(size=(100, 6)) * np.logspace(0, -1, 6)
    edit(fit_whitening(WhiteningStats().update(vectors))).save(str(tmp_path / "w.npz"))
    with pytest.raises(WhiteningError, match=re.escape(fragment)):
        Whitening.load(str(tmp_path / "w.npz"))


def test_the_precision_of_the_fitted_vectors_is_recorded_and_a_crafted_one_refused(tmp_path):
    rng = np.random.default_rng(0)
    whitening = fit_whitening(WhiteningStats().update(rng.normal(size=(50, 4))), precision="bfloat16")
    whitening.save(str(tmp_path / "w.npz"))
    assert Whitening.load(str(tmp_path / "w.npz")).precision == "bfloat16"
    with np.load(tmp_path / "w.npz") as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(str(arrays["meta"]))
    for value, loads in (("float16", False), (7, False), ("float32", True)):
        np.savez(tmp_path / "c.npz", **{**arrays, "meta": np.array(json.dumps({**meta, "precision": value}))})
        if loads:
            assert Whitening.load(str(tmp_path / "c.npz")).precision == value
        else:
            with pytest.raises(WhiteningError, match="metadata precision is"):
                Whitening.load(str(tmp_path / "c.npz"))
    del meta["precision"]  # a file of an earlier version
    np.savez(tmp_path / "old.npz", **{**arrays, "meta": np.array(json.dumps(meta))})
    assert Whitening.load(str(tmp_path / "old.npz")).precision == ""


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("pooling", "max", "metadata pooling is 'max', expected one of '', 'first-last-avg'"),
        ("n_components", 99, "metadata n_components is 99, larger than its dimension 4"),
        ("tokenization", {"maxlen": "64", "lowercase": True}, "metadata tokenization is {'maxlen': '64', 'lowercase"),
        ("tokenization", {"maxlen": 64}, "metadata tokenization is {'maxlen': 64}, expected {} or {"),
        ("tokenization", {"maxlen": 64, "lowercase": 1}, "metadata tokenization is {'maxlen': 64, 'lowercase': 1}"),
    ],
)
def test_a_crafted_pooling_or_n_components_is_refused_naming_the_file(tmp_path, field, value, fragment):
    """Once refused only when an encoder was built, in a message naming neither the file nor
    where the value came from (``unknown pooling 'max'``, ``n_components 99 is larger than the
    vector dimension``)."""
    rng = np.random.default_rng(0)
    fit_whitening(WhiteningStats().update(rng.normal(size=(50, 4))), pooling="cls").save(str(tmp_path / "w.npz"))
    with np.load(tmp_path / "w.npz") as data:
        arrays = {name: data[name] for name in data.files}
    meta = {**json.loads(str(arrays["meta"])), field: value}
    np.savez(tmp_path / "c.npz", **{**arrays, "meta": np.array(json.dumps(meta))})
    with pytest.raises(WhiteningError, match=re.escape("%s: %s" % (tmp_path / "c.npz", fragment))):
        Whitening.load(str(tmp_path / "c.npz"))


def test_a_recorded_field_is_refused_in_its_exact_line_and_maxlen_2_is_the_shortest_cut(tmp_path):
    rng = np.random.default_rng(0)
    shortest = {"maxlen": 2, "lowercase": True}
    fit_whitening(WhiteningStats().update(rng.normal(size=(50, 4))), tokenization=shortest).save(
        str(tmp_path / "w.npz")
    )
    assert Whitening.load(str(tmp_path / "w.npz")).tokenization == shortest
    with np.load(tmp_path / "w.npz") as data:
        arrays = {name: data[name] for name in data.files}
    path = tmp_path / "c.npz"
    for field, value, said in [
        (
            "tokenization",
            {"maxlen": 1, "lowercase": True},
            "metadata tokenization is {'maxlen': 1, 'lowercase': True}, expected {} or {\"maxlen\": an integer >= 2, "
            '"lowercase": true or false}',
        ),
        (
            "pooling",
            "max",
            "metadata pooling is 'max', expected one of '', 'first-last-avg', 'last-avg', 'cls', 'pooler'",
        ),
    ]:
        meta = {**json.loads(str(arrays["meta"])), field: value}
        np.savez(path, **{**arrays, "meta": np.array(json.dumps(meta))})
        with pytest.raises(WhiteningError) as raised:
            Whitening.load(str(path))
        assert str(raised.value) == "%s: %s" % (path, said)


def test_update_from_npy_refuses_a_count_of_rows_that_is_not_positive_and_a_file_that_is_not_npy(tmp_path):
    from bert_whitening.errors import BertWhiteningError, DataError

    path = str(tmp_path / "v.npy")
    np.save(path, correlated(40))
    for rows in (-1, 0, 2.5, True):
        expected = "^rows must be a positive integer, got %s$" % re.escape(repr(rows))
        with pytest.raises(BertWhiteningError, match=expected):
            WhiteningStats().update_from_npy(path, rows=rows)
    assert WhiteningStats().update_from_npy(path, rows=7).count == 40
    text = tmp_path / "v.txt"
    text.write_text("0.1 0.2\n0.3 0.4\n")
    with pytest.raises(DataError, match=r"^%s: not a \.npy file" % re.escape(str(text))) as raised:
        WhiteningStats().update_from_npy(str(text))
    assert "pickle" not in str(raised.value)


def scaled_column(whitening, column, factor, eigenvalue=None):
    """``whitening`` with one kernel column scaled, and its eigenvalue set to ``eigenvalue``."""
    kernel, eigenvalues = whitening.kernel.copy(), whitening.eigenvalues.copy()
    kernel[:, column] *= factor
    if eigenvalue is not None:
        eigenvalues[column] = eigenvalue
    return dataclasses.replace(whitening, kernel=kernel, eigenvalues=eigenvalues)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda w: scaled_column(w, 5, 1e3), "kernel column 5 has squared norm"),
        # a kept eigenvalue of 0 or a subnormal one claims an infinite norm, which any column matched
        (lambda w: scaled_column(w, 5, 1e3, 0.0), "eigenvalue 5 is 0, but rank 6 keeps it"),
        (lambda w: scaled_column(w, 5, 1e3, -0.0), "eigenvalue 5 is -0, but rank 6 keeps it"),
        (lambda w: scaled_column(w, 5, 1e3, 5e-324), "makes kernel column 5's squared norm s ** -gamma infinite"),
        (lambda w: dataclasses.replace(w, kernel=w.kernel * 1e160), "kernel.T @ kernel overflows float64"),
    ],
)
def test_a_kernel_rescaled_behind_an_infinite_claim_is_refused_naming_the_file(tmp_path, edit, fragment):
    """Every kept column's norm is compared with a finite claim: with an eigenvalue of 0 or
    5e-324, ``s ** -gamma`` was inf and ``|d - inf| <= 1e-6 * inf`` held for any column, so a
    column scaled at will loaded and moved cosines by up to 1.9. The file records no floor, as
    those of earlier versions (one that does is refused below its floor)."""
    vectors = np.random.default_rng(2).normal(size=(100, 6)) * np.logspace(0, -1, 6)
    fitted = fit_whitening(WhiteningStats().update(vectors))
    assert fitted.rank == 6
    path = str(tmp_path / "w.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning either
        dataclasses.replace(edit(fitted), floor=0.0).save(path)
        without_floor(path)
        with pytest.raises(WhiteningError, match="^" + re.escape("%s: " % path) + ".*" + re.escape(fragment)):
            Whitening.load(path)


def without_floor(path):
    """The whitening file ``path`` as earlier versions wrote it, its metadata without a floor."""
    with np.load(path) as data:
        arrays = dict(data)
    meta = json.loads(str(arrays["meta"]))
    del meta["floor"]
    np.savez(path, **{**arrays, "meta": np.array(json.dumps(meta))})


def test_a_gamma_whose_squared_column_norms_overflow_is_refused_at_fit():
    """The kernel's scales ``s ** (-gamma / 2)`` may fit in float64 while their squares, the
    column norms its own load compares, do not: such a fit wrote a file it then refused."""
    vectors = np.random.default_rng(0).normal(size=(200, 8)) * 1e-3
    with pytest.raises(WhiteningError, match=re.escape("gamma 60 makes the kernel infinite (overflow)")):
        fit_whitening(WhiteningStats().update(vectors), gamma=60.0)


@pytest.mark.parametrize(
    "batch, said",
    [
        (np.ones((5, 4)) + 1j, "holds complex128, expected vectors of real numbers (float or int)"),
        (np.array([["1", "2"], ["3", "5"]]), "holds <U1, expected vectors of real numbers (float or int)"),
        (np.ones((5, 4), bool), "holds bool, expected vectors of real numbers (float or int)"),
        (np.ones((5, 4)).astype(object), "holds object, expected vectors of real numbers (float or int)"),
        (np.zeros((5, 0)), "expected a 2-D array of vectors (one a row, at least one column), got shape (5, 0)"),
        ([[1.0, 2.0], [3.0]], "not an array of vectors ("),
    ],
)
def test_a_batch_that_is_not_real_vectors_is_refused_in_one_line(batch, said):
    """Complex vectors lost their imaginary part with a ComplexWarning only, strings were parsed,
    and vectors of no column failed at the fit with numpy's 'argmax of an empty sequence'."""
    stats = WhiteningStats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(WhiteningError, match="^" + re.escape("the batch: " + said)):
            stats.update(batch)
    assert (stats.count, stats.dim) == (0, None)


def test_integer_vectors_are_real_numbers_and_a_dimension_must_be_positive(tmp_path):
    counts = np.random.default_rng(0).integers(0, 50, size=(40, 4))
    for kind in (np.int64, np.uint8, np.int8):
        stats = WhiteningStats().update(counts.astype(kind))
        np.testing.assert_array_equal(stats.mean, counts.mean(axis=0))
    for dim in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="^dim must be a positive integer, got %s$" % re.escape(repr(dim))):
            WhiteningStats(dim)
    path = str(tmp_path / "none.npy")
    np.save(path, np.zeros((10, 0), np.float32))
    with pytest.raises(
        ValueError, match="^%s: expected a 2-D array of vectors .* got shape \\(10, 0\\)$" % re.escape(path)
    ):
        WhiteningStats().update_from_npy(path)


def cosine_gap_to_the_original(x):
    """The largest difference of the whitened cosines of ``x`` from the original scripts'."""
    kernel, bias = compute_kernel_bias(x)
    original = original_transform_and_normalize(x, *original_kernel_bias([x]))
    ours = transform_and_normalize(x, kernel, bias)
    return np.abs(ours @ ours.T - original @ original.T).max()


def test_float64_vectors_get_float64s_rank_floor(caplog):
    """The floor assumed float32 vectors whatever was fed: float64 columns 1e7 apart got rank 2
    (cosines 0.23 off the original), and a mean 1e7 times a unit spread was refused as 'all 200
    vectors are identical'. Scales whose variances part by 1/eps64 (1e8 apart) are beyond what
    float64's eigen-decomposition resolves, which the warning says."""
    base = np.random.default_rng(0).normal(size=(200, 8))
    scaled = base * np.r_[1e7, np.ones(7)]
    for x in (scaled, base + 1e7):
        with caplog.at_level(logging.WARNING):
            assert fit_whitening(stats_of(x)).rank == 8
        assert caplog.messages == []
        assert cosine_gap_to_the_original(x) < 1e-9
    with caplog.at_level(logging.WARNING):
        assert fit_whitening(stats_of(base * np.r_[1e8, np.ones(7)])).rank == 1
    assert "what float64's eigen-decomposition resolves beside the largest eigenvalue" in caplog.text


def test_float32_vectors_keep_float32s_floor_even_cast_to_float64():
    """Model vectors are float32, and eval scores them cast to float64: either way their floor is
    float32's (a LayerNorm's null direction stays below it), and so is a union with them."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 16)) * np.geomspace(3, 0.3, 16)
    z = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)
    x = (z * (1 + 0.3 * rng.normal(size=16)) + 100 * rng.normal(size=16)).astype(np.float32)
    stats = stats_of(x)
    mean_squared_norm = (x.astype(np.float64) ** 2).sum(axis=1).mean()
    assert stats.epsilon == np.finfo(np.float32).eps
    fitted = fit_whitening(stats)
    assert fitted.rank == 15 and fitted.floor == pytest.approx(np.finfo(np.float32).eps ** 2 * mean_squared_norm)
    cast = fit_whitening(stats_of(x.astype(np.float64)))
    assert (cast.rank, cast.floor) == (15, fitted.floor)
    np.testing.assert_array_equal(cast.kernel, fitted.kernel)
    assert stats_of(rng.normal(size=(5, 16))).epsilon == np.finfo(np.float64).eps
    assert stats_of(np.ones((2, 16), np.float16)).epsilon == np.finfo(np.float16).eps
    float64 = stats_of(x.astype(np.float64) + rng.normal(size=(500, 16)) * 1e-3)
    for merged in (stats_of(x).merge(float64), float64.merge(stats_of(x)), stats_of(x[:1], x.astype(np.float64))):
        assert merged.epsilon == np.finfo(np.float32).eps  # the coarser precision reaches the union


def test_vectors_are_said_identical_only_when_they_are():
    """A mean of equal values is not always exactly that value (0.1 three times), so the scatter
    of identical vectors need not be 0; and vectors that differ, by less than their precision's
    round-off, are not identical."""
    assert raised(lambda: fit_whitening(stats_of(np.full((3, 4), 0.1)))) == (
        "all 3 vectors are identical: nothing to whiten"
    )
    merged = stats_of(np.full((2, 4), 0.1)).merge(stats_of(np.full((5, 4), 0.1)))
    assert raised(lambda: fit_whitening(merged)) == "all 7 vectors are identical: nothing to whiten"
    near = (np.full((200, 4), 1e7) + np.random.default_rng(0).normal(size=(200, 4))).astype(np.float32)
    said = raised(lambda: fit_whitening(stats_of(near)))
    assert said.startswith("the 200 vectors differ only by round-off: their largest variance, ")
    assert "what rounding to their precision (machine epsilon 1.19e-07) gives vectors of mean squared norm" in said
    tiny = np.random.default_rng(0).normal(size=(20, 4)) * 1e-300
    assert raised(lambda: fit_whitening(stats_of(tiny))) == (
        "the 20 vectors are too small: their spread squared underflows float64 (largest entry %.3g); scale them up"
        % np.abs(tiny).max()
    )


def test_the_floor_is_saved_and_a_file_whose_rank_disagrees_with_it_is_refused(tmp_path):
    vectors = correlated(10)  # rank 9 of 16: seven floored columns
    fitted = fit_whitening(stats_of(vectors), allow_rank_deficient=True)
    path = str(tmp_path / "w.npz")
    fitted.save(path)
    assert Whitening.load(path).floor == fitted.floor > 0
    eigenvalues = fitted.eigenvalues.copy()
    kernel = fitted.kernel.copy()
    kernel[:, 12] *= 1e3  # a floored column scaled: its norm is the floor's, not its neighbours'
    for edit, said in (
        (dict(floor=fitted.eigenvalues[8]), "eigenvalue 8 is %.6g, but rank 9 keeps it" % fitted.eigenvalues[8]),
        (
            dict(floor=fitted.eigenvalues[8] / 2, rank=8),
            "eigenvalue 8 (%.6g) is above the round-off floor" % eigenvalues[8],
        ),
        (dict(kernel=kernel), "kernel column 12 has squared norm"),
        (dict(floor=fitted.floor * 2), "kernel column 9 has squared norm"),
    ):
        dataclasses.replace(fitted, **edit).save(path)
        with pytest.raises(WhiteningError, match="^" + re.escape("%s: %s" % (path, said))):
            Whitening.load(path)
    fitted.save(path)
    rewrite_meta(path, floor=-1.0)
    with pytest.raises(WhiteningError, match=re.escape("%s: metadata floor is -1.0, expected a finite number" % path)):
        Whitening.load(path)
    without_floor(path)  # a file of an earlier version
    assert Whitening.load(path).floor == 0.0


def test_statistics_beyond_a_model_s_largest_dimension_are_refused_before_they_are_made():
    """``WhiteningStats(10**12)`` was numpy's MemoryError (8e24 bytes asked for); a batch of
    100,000 columns would have asked for 80 GB. No whitening file holds more than 8192."""
    for make in (lambda: WhiteningStats(10**12), lambda: WhiteningStats().update(np.zeros((2, 8193), np.float32))):
        with pytest.raises(WhiteningError, match=r"^vectors of dimension (1000000000000|8193): at most 8192"):
            make()
    assert WhiteningStats(8192).dim == 8192


def test_merge_takes_another_accumulator_only():
    stats = WhiteningStats().update(np.eye(3, dtype=np.float32))
    with pytest.raises(
        WhiteningError, match="^cannot merge statistics with themselves: every vector would count twice$"
    ):
        stats.merge(stats)
    with pytest.raises(WhiteningError, match="^merge takes WhiteningStats, got NoneType$"):
        stats.merge(None)
    assert stats.count == 3 and WhiteningStats().merge(WhiteningStats()).count == 0


def test_a_whitening_prints_as_one_line_of_what_it_is():
    """The dataclass's repr printed every array: a notebook cell showing ``encoder.fit(...)`` of a
    768-dimensional model ran to thousands of lines."""
    vectors = np.random.default_rng(0).normal(size=(50, 40))
    text = repr(fit_whitening(WhiteningStats().update(vectors), n_components=16, pooling="cls"))
    assert (
        text == "Whitening(dim=40, rank=40, count=50, n_components=16, beta=1, gamma=1, pooling='cls', "
        "precision='', codes='float32')"
    )


def test_the_tokenization_a_whitening_records_is_read_back_and_an_earlier_file_has_none(tmp_path):
    rng = np.random.default_rng(0)
    tokenization = {"maxlen": 16, "lowercase": False}
    fitted = fit_whitening(WhiteningStats().update(rng.normal(size=(50, 4))), tokenization=tokenization)
    fitted.save(str(tmp_path / "w.npz"))
    assert Whitening.load(str(tmp_path / "w.npz")).tokenization == tokenization
    with np.load(tmp_path / "w.npz") as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["tokenization"]  # a file of an earlier version
    np.savez(tmp_path / "old.npz", **{**arrays, "meta": np.array(json.dumps(meta))})
    assert Whitening.load(str(tmp_path / "old.npz")).tokenization == {}


@pytest.mark.parametrize(
    "vectors, n_components, message",
    [
        (None, 2.7, "n_components must be an integer, got float 2.7"),  # was cut to 2
        (None, True, "n_components must be an integer, got bool True"),  # was 1
        (None, "3", "n_components must be an integer, got str '3'"),
        (lambda x: x[:, :5], None, "vectors: vectors of dimension 5, the whitening's is 16"),
        (lambda x: x[0], None, "vectors: expected a 2-D array of vectors (one a row, at least one column), got shape"),
        (lambda x: np.full((1, 16), np.nan), None, "vectors: row 0 (0-based): the vector holds nan (column 0)"),
        (lambda x: np.full((1, 16), "a"), None, "vectors: holds <U1, expected vectors of real numbers"),
    ],
)
def test_transform_refuses_what_the_statistics_refuse(vectors, n_components, message):
    """As `WhiteningStats.update` and the fit refuse them, in one line: numpy's own errors (a
    broadcast, an axis), a silently cut count and NaN rows out were what transform gave."""
    x = correlated(200, seed=1)
    whitening = fit_whitening(stats_of(x))
    with pytest.raises(BertWhiteningError, match="^" + re.escape(message)):
        whitening.transform(vectors(x) if vectors else x[:2], n_components)

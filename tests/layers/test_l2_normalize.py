import numpy as np
import pytest

from bert_whitening.backend import keras
from bert_whitening.layers import L2Normalize
from bert_whitening.vectors import l2_normalize

from layer_checks import assert_config_round_trip, assert_save_and_load
from reference import original_transform_and_normalize


def test_matches_the_original_normalisation_including_zero_vectors():
    x = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    x[3] = 0.0
    np.testing.assert_allclose(L2Normalize()(x).numpy(), original_transform_and_normalize(x), atol=1e-6)


def test_config_keeps_every_argument_and_round_trips(tmp_path):
    layer = L2Normalize(epsilon=1e-6, axis=1, name="normalize")
    clone = assert_config_round_trip(layer)
    assert (clone.epsilon, clone.axis) == (1e-6, 1)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, L2Normalize()(inputs))
    assert_save_and_load(model, np.arange(8, dtype=np.float32).reshape(2, 4), tmp_path)


@pytest.mark.parametrize("normalize", [lambda x: L2Normalize()(x).numpy(), l2_normalize], ids=["layer", "numpy"])
def test_huge_vectors_keep_their_direction(normalize):
    """Squared, entries of 1e30 overflow float32 to inf, and the naive form gives a zero vector."""
    direction = np.array([[3.0, -4.0, 0.0, 12.0], [1.0, 0.0, 0.0, 0.0]], dtype=np.float32) / np.float32([[13], [1]])
    huge = (direction * np.float32(1e30)).astype(np.float32)
    with np.errstate(over="ignore"):
        naive = huge / np.maximum(np.sqrt((huge**2).sum(axis=1, keepdims=True)), 1e-8)
    np.testing.assert_array_equal(naive, 0 * huge)  # what the division by an inf norm gave
    np.testing.assert_allclose(normalize(huge), direction, rtol=1e-6)
    np.testing.assert_allclose(normalize(direction * np.float32(1e-6)), direction, rtol=1e-6)
    below = direction * np.float32(1e-9)  # a norm below epsilon is divided by epsilon, as ever
    np.testing.assert_allclose(normalize(below), below / 1e-8, rtol=1e-6)
    np.testing.assert_array_equal(normalize(np.zeros((1, 4), np.float32)), np.zeros((1, 4)))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_integer_vectors_are_normalised_in_float64_as_the_original_does(dtype):
    """In their own dtype every norm was cut to a whole number: [1, 1] came out of norm 1.41."""
    x = np.array([[1, 1], [3, 4], [0, 0], [1, 0]], dtype=dtype)
    normalized = l2_normalize(x)
    assert normalized.dtype == np.float64
    np.testing.assert_allclose(normalized, original_transform_and_normalize(x.astype(np.float64)), rtol=1e-15)


@pytest.mark.parametrize("normalize", [lambda x: L2Normalize()(x).numpy(), l2_normalize], ids=["layer", "numpy"])
def test_vectors_without_a_positive_entry_keep_their_direction(normalize):
    """The scale is the largest absolute entry: a vector of negative entries, or one whose
    positive entries are tiny next to its negative ones, is normalised like any other."""
    x = np.array([[-3.0, -4.0, 0.0], [-1e30, 1e-30, 0.0], [-2.0, -1e-6, -1.0]], dtype=np.float32)
    expected = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(normalize(x), expected, rtol=1e-6, atol=1e-30)

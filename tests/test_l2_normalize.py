import numpy as np

from bert_whitening.backend import keras
from bert_whitening.layers import L2Normalize

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

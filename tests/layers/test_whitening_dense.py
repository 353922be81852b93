import numpy as np

from bert_whitening.backend import keras
from bert_whitening.layers import WhiteningDense
from bert_whitening.whitening import WhiteningStats, fit_whitening

from layer_checks import assert_config_round_trip, assert_save_and_load


def fitted(dim=6, rows=200):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(rows, dim)) * np.linspace(3, 0.5, dim) + 2.0
    return vectors.astype(np.float32), fit_whitening(WhiteningStats().update(vectors))


def test_equals_x_plus_bias_times_kernel():
    vectors, whitening = fitted()
    layer = WhiteningDense.from_whitening(whitening, 4)
    expected = (vectors + whitening.bias) @ whitening.kernel[:, :4]
    outputs = layer(vectors).numpy()
    assert outputs.dtype == np.float32
    np.testing.assert_allclose(outputs, expected, atol=1e-5)


def test_is_not_trainable_by_default():
    _, whitening = fitted()
    layer = WhiteningDense.from_whitening(whitening, 6)
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == 2
    assert WhiteningDense(3, trainable=True).trainable


def test_config_holds_sizes_and_weights_are_saved_apart(tmp_path):
    vectors, whitening = fitted()
    layer = WhiteningDense.from_whitening(whitening, 5, name="whitening")
    config = assert_config_round_trip(layer).get_config()
    assert config["units"] == 5 and config["trainable"] is False
    layer.set_weights([w * 0 + 1e6 for w in layer.get_weights()])
    assert layer.get_config() == config  # the weights are not part of the config
    inputs = keras.Input((6,))
    model = keras.Model(inputs, layer(inputs))
    assert_save_and_load(model, vectors[:10], tmp_path)


def test_a_large_mean_next_to_a_small_spread_is_whitened_in_float64():
    """``x W`` and ``b`` nearly cancel when the mean (1000) is far larger than the spread (0.01):
    in float32 their difference would keep about two digits; the layer's float64 keeps them all
    (against ``(x - mean) @ kernel``, written in float64 so that nothing cancels)."""
    rng = np.random.default_rng(0)
    vectors = (1000.0 + rng.normal(size=(200, 6)) * np.linspace(0.02, 0.005, 6)).astype(np.float32)
    whitening = fit_whitening(WhiteningStats().update(vectors))
    layer = WhiteningDense.from_whitening(whitening, 6)
    expected = (vectors.astype(np.float64) + whitening.bias) @ whitening.kernel
    assert np.abs(expected).max() > 1  # whitened: unit variance
    np.testing.assert_allclose(layer(vectors).numpy(), expected, atol=1e-4)

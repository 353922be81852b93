import numpy as np

from bert_whitening.backend import keras
from bert_whitening.layers import MaskedAveragePooling

from layer_checks import assert_config_round_trip, assert_save_and_load

IDS = np.array([[2, 7, 9, 3, 0, 0], [2, 5, 3, 0, 0, 0], [2, 4, 4, 4, 4, 3]], dtype=np.int32)


def hidden_states(seed):
    return np.random.default_rng(seed).normal(size=IDS.shape + (5,)).astype(np.float32)


def masked_mean(hidden):
    real = (IDS != 0)[:, :, None]
    return (hidden * real).sum(1) / real.sum(1)


def test_first_last_average_over_real_tokens_only():
    first, last = hidden_states(0), hidden_states(1)
    pooled = MaskedAveragePooling()([first, last], padding_mask=IDS).numpy()
    np.testing.assert_allclose(pooled, (masked_mean(first) + masked_mean(last)) / 2, atol=1e-6)


def test_single_input_is_last_avg_and_bool_masks_work():
    last = hidden_states(2)
    expected = masked_mean(last)
    np.testing.assert_allclose(MaskedAveragePooling()(last, padding_mask=IDS != 0), expected, atol=1e-6)
    np.testing.assert_allclose(MaskedAveragePooling()([last], padding_mask=IDS), expected, atol=1e-6)


def test_padding_garbage_does_not_change_the_result():
    last = hidden_states(3)
    noisy = last + (IDS == 0)[:, :, None] * 100.0
    layer = MaskedAveragePooling()
    np.testing.assert_allclose(layer(noisy, padding_mask=IDS), layer(last, padding_mask=IDS), atol=1e-5)


def test_keras_mask_is_used_when_no_padding_mask_is_given():
    ids = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 5, mask_zero=True)(ids)
    model = keras.Model(ids, MaskedAveragePooling()(embedded))
    table = model.layers[1].get_weights()[0]
    np.testing.assert_allclose(model.predict_on_batch(IDS), masked_mean(table[IDS]), atol=1e-6)


def test_without_any_mask_every_position_counts_and_empty_rows_give_zeros():
    last = hidden_states(4)
    np.testing.assert_allclose(MaskedAveragePooling()(last), last.mean(1), atol=1e-6)
    empty = MaskedAveragePooling()(last, padding_mask=np.zeros_like(IDS)).numpy()
    assert np.all(empty == 0)


def test_config_and_save_load_round_trip(tmp_path):
    assert_config_round_trip(MaskedAveragePooling(name="pooling"))
    ids = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(10, 5)(ids)
    model = keras.Model(ids, MaskedAveragePooling()([hidden, hidden * 2.0], padding_mask=ids))
    assert_save_and_load(model, IDS, tmp_path)

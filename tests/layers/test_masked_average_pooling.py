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


def test_a_padding_mask_given_wins_over_the_keras_mask():
    """The Keras mask is only the fallback: a ``padding_mask`` given is what counts, even where
    the input carries a Keras mask that says otherwise."""
    ids = keras.Input((None,), dtype="int32")
    given = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(10, 5, mask_zero=True)
    model = keras.Model([ids, given], MaskedAveragePooling()(embedding(ids), padding_mask=given))
    table = embedding.get_weights()[0]
    first_two = np.zeros_like(IDS)
    first_two[:, :2] = 1  # the first two positions only, not the Keras mask's real tokens
    real = first_two[:, :, None]
    expected = (table[IDS] * real).sum(1) / real.sum(1)
    np.testing.assert_allclose(model.predict_on_batch([IDS, first_two]), expected, atol=1e-6)


def test_without_a_padding_mask_the_first_inputs_keras_mask_counts_for_every_input():
    """first-last-avg on inputs whose Keras masks differ: the first input's mask is the one used."""
    first_ids, last_ids = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    first_layer, last_layer = (
        keras.layers.Embedding(10, 5, mask_zero=True),
        keras.layers.Embedding(10, 5, mask_zero=True),
    )
    pooled = MaskedAveragePooling()([first_layer(first_ids), last_layer(last_ids)])
    model = keras.Model([first_ids, last_ids], pooled)
    other = np.where(IDS == 0, 0, 1)
    other[:, 1] = 0  # a mask for the last input that leaves out a real token of the first
    first_table, last_table = first_layer.get_weights()[0], last_layer.get_weights()[0]
    real = (IDS != 0)[:, :, None]
    expected = ((first_table[IDS] * real).sum(1) + (last_table[other] * real).sum(1)) / real.sum(1) / 2
    np.testing.assert_allclose(model.predict_on_batch([IDS, other]), expected, atol=1e-6)

import numpy as np

from bert_whitening.backend import keras
from bert_whitening.layers import FirstTokenPooling

from layer_checks import assert_config_round_trip, assert_save_and_load


def test_takes_the_first_position_and_drops_the_mask():
    ids = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(ids)
    pooled = FirstTokenPooling()(embedded)
    assert getattr(pooled, "_keras_mask", None) is None
    model = keras.Model(ids, pooled)
    batch = np.array([[2, 5, 3, 0], [2, 3, 0, 0]], dtype=np.int32)
    table = model.layers[1].get_weights()[0]
    np.testing.assert_allclose(model.predict_on_batch(batch), table[[2, 2]], atol=1e-7)


def test_config_and_save_load_round_trip(tmp_path):
    assert_config_round_trip(FirstTokenPooling(name="cls"))
    ids = keras.Input((None,), dtype="int32")
    model = keras.Model(ids, FirstTokenPooling()(keras.layers.Embedding(10, 4)(ids)))
    assert_save_and_load(model, np.array([[2, 5, 3], [4, 3, 0]], dtype=np.int32), tmp_path)


def test_a_list_of_blocks_gives_the_first_token_of_the_last():
    """Given ``[first_block, last_block]`` (what `FusedBert` returns), ``cls`` is the last block's
    first token, as the original's ``cls`` pooling reads it off the last block."""
    rng = np.random.default_rng(0)
    first, last = (rng.normal(size=(3, 4, 5)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(FirstTokenPooling()([first, last]).numpy(), last[:, 0, :])
    np.testing.assert_array_equal(FirstTokenPooling()(first).numpy(), first[:, 0, :])

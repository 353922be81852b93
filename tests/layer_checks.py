"""Checks every layer test runs: config round trip, and weights saved apart from the config."""

import numpy as np

from bert_whitening.backend import keras
from bert_whitening.layers import CUSTOM_OBJECTS


def assert_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    assert config["name"] == layer.name  # chained to the parent's config
    return clone


def assert_save_and_load(model, inputs, tmp_path):
    """Rebuild ``model`` from its JSON config, load weights saved apart, compare outputs."""
    weights = str(tmp_path / "weights.h5")
    model.save_weights(weights)
    clone = keras.models.model_from_json(model.to_json(), custom_objects=CUSTOM_OBJECTS)
    clone.load_weights(weights)
    np.testing.assert_allclose(clone.predict_on_batch(inputs), model.predict_on_batch(inputs), rtol=0, atol=1e-6)

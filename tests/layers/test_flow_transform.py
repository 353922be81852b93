import pickle

import numpy as np
import pytest

from bert_whitening.backend import keras, tf
from bert_whitening.flow import Flow
from bert_whitening.layers import FlowTransform

from layer_checks import assert_config_round_trip, assert_save_and_load
from test_flow import CONFIGS, SMALL, np_flow, randomised, sample


@pytest.mark.parametrize("config", CONFIGS[:2])
def test_equals_the_numpy_flow_latent(config):
    flow = randomised(Flow(16, config, np.random.default_rng(0)))
    x = sample(rows=64).astype(np.float32)
    outputs = FlowTransform.from_flow(flow)(x).numpy()
    assert outputs.dtype == np.float32
    np.testing.assert_allclose(outputs, np_flow(flow, x.astype(np.float64))[0], rtol=1e-6, atol=1e-5)


def test_is_not_trainable_by_default_and_holds_a_copy_of_the_weights():
    flow = randomised(Flow(16, None, np.random.default_rng(0)))
    layer = FlowTransform.from_flow(flow)
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == len(flow.weights)
    x = sample(rows=8)
    before = layer(x).numpy()
    randomised(flow, seed=5)  # the layer keeps the values it was made with
    np.testing.assert_array_equal(layer(x).numpy(), before)


def test_config_holds_the_shape_and_weights_are_saved_apart(tmp_path):
    flow = randomised(Flow(16, {"coupling": "affine", "n_levels": 2}, np.random.default_rng(0)))
    layer = FlowTransform.from_flow(flow, name="flow")
    config = assert_config_round_trip(layer).get_config()
    assert (
        config["dim"] == 16 and config["flow_config"]["coupling"] == "affine" and config["flow_config"]["n_levels"] == 2
    )
    inputs = keras.Input((16,))
    model = keras.Model(inputs, layer(inputs))
    assert_save_and_load(model, sample(rows=10).astype(np.float32), tmp_path)


def test_a_flow_pickles_with_its_weights_and_record():
    """Beam ships the encoder's configuration, a flow included, to its workers by pickling."""
    flow = randomised(Flow(16, {"coupling": "affine"}, np.random.default_rng(0)))
    flow.pooling, flow.model_identity, flow.training_summary = "cls", {"name": "m"}, {"seed": 2}
    copy = pickle.loads(pickle.dumps(flow))
    x = sample(rows=8)
    np.testing.assert_array_equal(copy.transform(x), flow.transform(x))
    assert (copy.config, copy.pooling, copy.model_identity, copy.training_summary) == (
        flow.config,
        "cls",
        {"name": "m"},
        {"seed": 2},
    )


def test_a_keras_model_holding_a_flow_saves_as_a_saved_model(tmp_path):
    """Saving traces each layer: a volume-preserving step's log-determinant must stay float64
    (a small flow with every kind of layer)."""
    flow = randomised(Flow(16, SMALL, np.random.default_rng(0)))
    inputs = keras.Input((16,))
    model = keras.Model(inputs, FlowTransform.from_flow(flow)(inputs))
    tf.saved_model.save(model, str(tmp_path / "saved"))
    x = sample(rows=4).astype(np.float32)
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    (outputs,) = served(tf.constant(x)).values()
    np.testing.assert_allclose(outputs.numpy(), model(x).numpy(), atol=1e-6)

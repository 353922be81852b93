"""A trained BERT-flow as a layer, in place of the whitening Dense."""

import dataclasses

from bert_whitening.backend import keras, tf
from bert_whitening.flow import Flow


class FlowTransform(keras.layers.Layer):
    """The latent of a `bert_whitening.flow.Flow` (its forward pass) of each pooled vector.

    The config holds the flow's dimension and shape (`bert_whitening.flow.FlowConfig`); its
    weights are the layer's, saved apart, and not trainable, so fine-tuning the encoder leaves
    the fitted flow alone. Like `WhiteningDense` it computes in float64 (as the flow was
    trained, and out of bfloat16 rewrites) and returns float32.

    Args:
        dim: the vector dimension.
        flow_config: the fields of the flow's `FlowConfig`.
    """

    def __init__(self, dim: int, flow_config: dict, trainable: bool = False, **kwargs):
        kwargs.pop("dtype", None)
        super().__init__(trainable=trainable, dtype="float64", **kwargs)
        self.dim, self.flow_config = dim, dict(flow_config)
        self.flow = Flow(dim, self.flow_config, name="flow")
        self.flow.trainable = trainable

    def build(self, input_shape):
        self.flow(tf.zeros([1, self.dim], tf.float64))  # creates the flow's weights
        super().build(input_shape)

    def call(self, inputs):
        return tf.cast(self.flow(tf.cast(inputs, tf.float64)), tf.float32)

    def get_config(self):
        config = super().get_config()
        config.pop("dtype", None)
        config.update(dim=self.dim, flow_config=self.flow_config)
        return config

    @classmethod
    def from_flow(cls, flow, **kwargs) -> "FlowTransform":
        """A built layer holding ``flow``'s weights."""
        layer = cls(flow.dim, dataclasses.asdict(flow.config), **kwargs)
        layer.build((None, flow.dim))
        layer.flow.set_weights(flow.get_weights())
        return layer

"""L2 normalisation of vectors."""

from bert_whitening.backend import keras, tf


class L2Normalize(keras.layers.Layer):
    """``x / max(||x||, epsilon)`` along ``axis``, as the original ``transform_and_normalize``.

    Masking: works on pooled vectors, so there is no mask to handle.

    Args:
        epsilon: the smallest norm divided by (the original's clip), so a zero vector stays zero.
        axis: the axis normalised.
    """

    def __init__(self, epsilon: float = 1e-8, axis: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.axis = axis

    def call(self, inputs):
        norms = tf.norm(inputs, axis=self.axis, keepdims=True)
        return inputs / tf.maximum(norms, self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "axis": self.axis}

"""L2 normalisation of vectors."""

from bert_whitening.backend import keras, tf


class L2Normalize(keras.layers.Layer):
    """``x / max(||x||, epsilon)`` along ``axis``, as the original ``transform_and_normalize``.

    The norm is taken of ``x`` divided by its largest absolute entry (then scaled back for the
    clip), as `bert_whitening.vectors.l2_normalize` does: squaring the raw entries overflows
    to inf for entries above the square root of the dtype's largest number, and the vector
    would come out as zeros instead of its direction.

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
        scale = tf.reduce_max(tf.abs(inputs), axis=self.axis, keepdims=True)
        scaled = inputs / tf.where(scale > 0, scale, tf.ones_like(scale))
        norms = tf.norm(scaled, axis=self.axis, keepdims=True)  # >= 1 for a non-zero vector
        large = norms * scale >= self.epsilon
        return tf.where(large, scaled / tf.maximum(norms, 1), inputs / self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "axis": self.axis}

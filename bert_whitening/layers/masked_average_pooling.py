"""Average of token vectors over the real tokens only."""

from bert_whitening.backend import keras, tf


class MaskedAveragePooling(keras.layers.Layer):
    """Mean over the real tokens of each input, then the mean of those means.

    Called on ``[first_block, last_block]`` it is ``first-last-avg``; on ``[last_block]`` (or a
    single tensor) it is ``last-avg``. Each input has shape ``(batch, length, hidden)``.

    Masking: pass ``padding_mask``, the token ids themselves or a 0/1 mask, where nonzero marks a
    real token. It is part of the graph, so it survives SavedModel export and any padding
    length gives the same vector. Without it the Keras mask of the first input is used (bert4keras
    models carry one), and without either every position counts. A row with no real token
    gives zeros rather than NaN.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, padding_mask=None, mask=None):
        inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        if padding_mask is None and mask is not None:
            padding_mask = mask[0] if isinstance(mask, (list, tuple)) else mask
        if padding_mask is None:
            weights = tf.ones_like(inputs[0][:, :, :1])
        else:
            real = tf.not_equal(tf.cast(padding_mask, tf.int32), 0)
            weights = tf.cast(real, inputs[0].dtype)[:, :, None]
        count = tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)
        means = [tf.reduce_sum(hidden * weights, axis=1) / count for hidden in inputs]
        return tf.add_n(means) / float(len(means))

    def compute_mask(self, inputs, mask=None):
        return None

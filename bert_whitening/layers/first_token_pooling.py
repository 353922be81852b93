"""The vector of the first token (``[CLS]``)."""

from bert_whitening.backend import keras


class FirstTokenPooling(keras.layers.Layer):
    """``cls`` pooling: the first position of a ``(batch, length, hidden)`` input.

    Masking: none is needed, since the first token is always the real ``[CLS]``; the incoming
    Keras mask is accepted and dropped, as the output has no time axis.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if isinstance(inputs, (list, tuple)):
            inputs = inputs[-1]
        return inputs[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

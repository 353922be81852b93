"""Whitening as a Dense layer."""
import numpy as np

from bert_whitening.backend import keras


class WhiteningDense(keras.layers.Dense):
    """``y = x W + b`` with ``W = kernel[:, :k]`` and ``b = bias @ W`` of a fitted whitening.

    This is exactly ``(x + bias) @ kernel[:, :k]``, so the whitening lives in the graph and is
    saved with it. The config holds only sizes and flags (``units``, ``trainable`` defaults to
    False so fine-tuning the encoder leaves the fitted whitening alone); the kernel and bias are
    weights, saved apart. Masking: works on pooled vectors, so there is no mask to handle.
    """

    def __init__(self, units, trainable=False, **kwargs):
        super().__init__(units, trainable=trainable, **kwargs)

    @classmethod
    def from_whitening(cls, whitening, n_components, **kwargs):
        """A built layer holding the first ``n_components`` columns of ``whitening``."""
        kernel = whitening.kernel[:, :n_components]
        layer = cls(n_components, **kwargs)
        layer.build((None, whitening.dim))
        layer.set_weights([kernel.astype(np.float32), (whitening.bias @ kernel).astype(np.float32)])
        return layer

"""Whitening as a Dense layer."""

from bert_whitening.backend import keras, tf


class WhiteningDense(keras.layers.Dense):
    """``y = x W + b`` with ``W = kernel[:, :k]`` and ``b = bias @ W`` of a fitted whitening.

    This is exactly ``(x + bias) @ kernel[:, :k]``, so the whitening lives in the graph and is
    saved with it. The config holds only sizes and flags (``units``, ``trainable`` defaults to
    False so fine-tuning the encoder leaves the fitted whitening alone); the kernel and bias are
    weights, saved apart. Masking: works on pooled vectors, so there is no mask to handle.

    It computes in float64 and returns float32. ``x W`` and ``b`` nearly cancel when the mean
    is large next to the spread, and the smallest directions are scaled up by ``1/sqrt(s)``, so
    rounding the input is what whitening can least afford; in float64 the layer also stays out
    of bfloat16 mixed-precision rewrites (``--precision bfloat16`` rounds only the transformer).

    Args:
        units: ``k``, the whitened dimensions kept.
        trainable: False, so that training the encoder leaves the fitted whitening alone.
        dtype: the dtype it computes in (float64; the output is float32).
    """

    def __init__(self, units: int, trainable: bool = False, dtype: str = "float64", **kwargs):
        super().__init__(units, trainable=trainable, dtype=dtype, **kwargs)

    def call(self, inputs):
        return tf.cast(super().call(inputs), tf.float32)

    @classmethod
    def from_whitening(cls, whitening, n_components: int, **kwargs) -> "WhiteningDense":
        """A built layer holding the first ``n_components`` columns of ``whitening``."""
        kernel = whitening.kernel[:, :n_components]
        layer = cls(n_components, **kwargs)
        layer.build((None, whitening.dim))
        layer.set_weights([kernel, whitening.bias @ kernel])
        return layer

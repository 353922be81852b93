"""BERT-whitening: sentence vectors for cosine similarity, fitted and served as one Keras graph.

Importing the package loads numpy only; the Keras parts (`bert_whitening.models`,
`bert_whitening.layers`, `bert_whitening.encoding`) import TensorFlow through
`bert_whitening.backend` when they are imported.
"""
from bert_whitening.whitening import (
                                      Whitening,
                                      WhiteningStats,
                                      compute_kernel_bias,
                                      fit_whitening,
                                      transform_and_normalize,
)

__version__ = "0.1.0"

__all__ = ["Whitening", "WhiteningStats", "compute_kernel_bias", "fit_whitening",
           "transform_and_normalize", "__version__"]

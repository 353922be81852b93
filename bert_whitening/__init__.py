"""BERT-whitening: sentence vectors for cosine similarity, fitted and served as one Keras graph.

    from bert_whitening import SentenceEncoder
    encoder = SentenceEncoder.load("minilm")
    encoder.fit(files=["corpus.txt"])
    vectors = encoder.encode(["今天天气很好"])

Importing the package loads numpy only; `SentenceEncoder` and `EncoderConfig` are imported on
first use, and TensorFlow once an encoder's Keras graph is built (`bert_whitening.backend`).
"""

import importlib

from bert_whitening.data import ReadOptions
from bert_whitening.whitening import (
    FitOptions,
    Whitening,
    WhiteningStats,
    compute_kernel_bias,
    fit_whitening,
    transform_and_normalize,
)

__version__ = "0.1.0"

_LAZY = {"SentenceEncoder": "bert_whitening.sentence_encoder", "EncoderConfig": "bert_whitening.config"}

__all__ = [
    "EncoderConfig",
    "FitOptions",
    "ReadOptions",
    "SentenceEncoder",
    "Whitening",
    "WhiteningStats",
    "compute_kernel_bias",
    "fit_whitening",
    "transform_and_normalize",
    "__version__",
]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module(_LAZY[name]), name)

"""BERT-whitening: sentence vectors for cosine similarity, fitted and served as one Keras graph.

    from bert_whitening import SentenceEncoder
    encoder = SentenceEncoder("minilm")  # as SentenceEncoder.load("minilm")
    encoder.fit(files=["corpus.txt"])
    vectors = encoder.encode(["今天天气很好"])

Importing the package loads nothing but the standard library: every name below is imported on
first use (numpy with the first, TensorFlow once an encoder's Keras graph is built,
`bert_whitening.backend`), so that the command line answers a signal from its first moment
(`bert_whitening.__main__`).
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "EncoderConfig": "bert_whitening.config",
    "EvalOptions": "bert_whitening.evaluation",
    "ExportOptions": "bert_whitening.export.options",
    "FitOptions": "bert_whitening.whitening",
    "IndexOptions": "bert_whitening.retrieval.index_directory",
    "ReadOptions": "bert_whitening.data",
    "RetrievalOptions": "bert_whitening.retrieval.evaluate",
    "SentenceEncoder": "bert_whitening.sentence_encoder",
    "Whitening": "bert_whitening.whitening",
    "WhiteningStats": "bert_whitening.whitening",
    "compute_kernel_bias": "bert_whitening.whitening",
    "fit_whitening": "bert_whitening.whitening",
    "semantic_search": "bert_whitening.sentence_transformers_names",
    "transform_and_normalize": "bert_whitening.whitening",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module(_LAZY[name]), name)

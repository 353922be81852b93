"""sentence-transformers' names as they mean here: what a user of ``SentenceTransformer`` passes
to ``encode`` (taken with the same meaning, or refused in one line naming our equivalent), its
output precisions, and ``util.semantic_search`` on numpy vectors.

numpy only: every refusal answers before the model is built.
"""

import numpy as np

from bert_whitening.arguments import positive_int, vector_array
from bert_whitening.codes import quantizer
from bert_whitening.errors import BertWhiteningError
from bert_whitening.vectors import check_vectors, l2_normalize

#: ``encode(precision=...)``: sentence-transformers' output precisions taken here. ``binary`` and
#: ``ubinary`` are each vector's signs packed 8 a byte (``int8``: offset by 128), so they need no
#: calibration; ``int8`` and ``uint8`` do (`ENCODE_KEYWORDS` says why they are refused).
OUTPUT_PRECISIONS = ("float32", "binary", "ubinary")

#: sentence-transformers' ``encode`` keywords that have no meaning here: ``{name: (the values
#: that change nothing, taken as given; the one line of a refusal of any other value)}``.
ENCODE_KEYWORDS = {
    "convert_to_tensor": (
        (False,),
        "convert_to_tensor: no tensors: encode returns a numpy array (bert-whitening runs on TensorFlow, not torch)",
    ),
    "device": (
        (None, "cpu"),
        "device: bert-whitening encodes on the CPU (TensorFlow's), in the process's precision "
        "(bert_whitening.precision.set_precision); give device=None or 'cpu'",
    ),
    "output_value": (
        ("sentence_embedding",),
        "output_value: encode gives pooled sentence vectors only; the pooling is chosen at load (pooling=...)",
    ),
    "prompt_name": ((None,), "prompt_name: an encoder has no prompts; prepend the prompt to each sentence"),
    "prompt": ((None, ""), "prompt: an encoder has no prompts; prepend the prompt to each sentence"),
    "truncate_dim": (
        (None,),
        "truncate_dim: the whitening keeps the k first dimensions: load(..., n_components=k) or fit(n_components=k)",
    ),
    "chunk_size": ((None,), "chunk_size: encode runs in this process; for many processes use beam-encode"),
    "pool": ((None,), "pool: encode runs in this process; for many processes use beam-encode"),
}

#: Why ``int8`` and ``uint8`` are refused: sentence-transformers calibrates their ranges on the
#: vectors of the call itself, so the codes of two calls (queries, corpus) are not comparable.
CALIBRATED = (
    "precision %r: sentence-transformers calibrates it on the call's own vectors, so two calls' codes differ; "
    "fit the whitening with codes='int8' (fit --codes int8): its scales are fitted once, with it"
)


def check_encode_keywords(keywords):
    """Refuse, in one line each, a sentence-transformers ``encode`` keyword ``keywords`` holds at
    a value that would change what it returns; any other name is Python's unexpected keyword."""
    for name, value in keywords.items():
        if name not in ENCODE_KEYWORDS:
            raise TypeError("encode() got an unexpected keyword argument %r" % name)
        accepted, refusal = ENCODE_KEYWORDS[name]
        if not any(value is same or (type(value) is type(same) and value == same) for same in accepted):
            raise BertWhiteningError(refusal)


def check_output_precision(precision):
    """``precision`` if it is one of `OUTPUT_PRECISIONS`; else one line: ``int8``/``uint8`` why,
    the process's ``bfloat16`` where it is set, anything else the choices."""
    if not isinstance(precision, str):
        raise BertWhiteningError("precision must be one of %s, got %r" % (", ".join(OUTPUT_PRECISIONS), precision))
    if precision in OUTPUT_PRECISIONS:
        return precision
    if precision in ("int8", "uint8"):
        raise BertWhiteningError(CALIBRATED % precision)
    if precision in ("bfloat16", "auto"):
        raise BertWhiteningError(
            "precision %r: encode's precision is its output's (as sentence-transformers'); the model's "
            "is the process's: bert_whitening.precision.set_precision(%r)" % (precision, precision)
        )
    raise BertWhiteningError("precision must be one of %s, got %r" % (", ".join(OUTPUT_PRECISIONS), precision))


def quantized(vectors, precision):
    """``vectors`` in the output ``precision``: float32 as they are; ``binary`` (int8) and
    ``ubinary`` (uint8) each row's signs (positive as 1) packed 8 a byte, the last byte padded
    with zeros, ``binary`` offset by -128 as sentence-transformers does."""
    if precision == "float32":
        return vectors
    vectors = np.asarray(vectors)
    packed = quantizer("binary", vectors.shape[1]).encode(vectors)
    return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)


#: Corpus rows scored against the queries at a time by `semantic_search` (bounds its memory).
CORPUS_ROWS_AT_ONCE = 65536


def semantic_search(query_vectors, corpus_vectors, top_k: int = 10) -> list:
    """For each query vector, the ``top_k`` corpus rows of largest cosine, as
    sentence-transformers' ``util.semantic_search`` gives them: ``[[{"corpus_id", "score"}, ...],
    ...]``, ``corpus_id`` the row from 0, by score from the largest (equal scores by row). Exact,
    in float64, on numpy arrays of real numbers of one width (a 1-D array is one vector); plain
    Python numbers throughout."""
    queries = _unit_rows(query_vectors, "query_vectors")
    corpus = _unit_rows(corpus_vectors, "corpus_vectors")
    if queries.shape[1] != corpus.shape[1]:
        raise BertWhiteningError(
            "corpus_vectors: vectors of dimension %d, the queries' are %d" % (corpus.shape[1], queries.shape[1])
        )
    top_k = min(positive_int(top_k, "top_k"), len(corpus))
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    best_scores = np.zeros((len(queries), 0))
    for start in range(0, len(corpus), CORPUS_ROWS_AT_ONCE):
        block = queries @ corpus[start : start + CORPUS_ROWS_AT_ONCE].T
        rows = np.broadcast_to(np.arange(start, start + block.shape[1]), block.shape)
        scores, ids = np.concatenate([best_scores, block], axis=1), np.concatenate([best_ids, rows], axis=1)
        order = np.lexsort((ids, -scores), axis=1)[:, :top_k]  # by score, then by row
        best_scores, best_ids = np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)
    return [
        [{"corpus_id": int(row), "score": float(score)} for row, score in zip(rows, scores, strict=True)]
        for rows, scores in zip(best_ids.tolist(), best_scores.tolist(), strict=True)
    ]


def _unit_rows(value, name):
    """``value`` checked as vectors (real, finite, at least one row) and L2-normalised in float64;
    one vector (1-D) is one row, as sentence-transformers takes it."""
    array = np.asarray(value) if isinstance(value, (np.ndarray, list, tuple)) else value
    vectors = vector_array(array[None, :] if getattr(array, "ndim", 0) == 1 else array, name)
    if not len(vectors):
        raise BertWhiteningError("%s: no vectors" % name)
    check_vectors(vectors, name, normalized=False)
    return l2_normalize(vectors.astype(np.float64))

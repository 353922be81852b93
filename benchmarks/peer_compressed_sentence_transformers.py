"""The peer's side of bench_compressed.py: sentence-transformers' compressed embeddings, in
.venv-torch (scripts/torch_venv.py).

    python peer_compressed_sentence_transformers.py REQUEST.json sts|retrieval

The model is the built-in all-MiniLM-L6-v2's directory as sentence-transformers loads it (its
Transformer, mean pooling and Normalize modules), maxlen as ``max_seq_length``, no download.

``sts``: REQUEST holds the tasks (``{task: {split: [[sentence1, sentence2, label]]}}``), the
truncation dimensions and the precisions. Each task's distinct sentences are encoded once; each
``(truncate_dim, precision)`` of each split is then scored by its own
``EmbeddingSimilarityEvaluator(truncate_dim=, precision=)``, whose ``embed_inputs`` is given
what ``model.encode(truncate_dim=, precision=, normalize_embeddings=True)`` returns, the
forward pass taken from that one encoding (`CachedEvaluator`): the first ``truncate_dim``
coordinates, normalised, through ``quantize_embeddings``, int8 and uint8 calibrated as its
documentation calibrates them, with ``calibration_embeddings``: here the task's sentences, every
split (the sample our whitening is fitted on). Before that, the genuine evaluator on
``model.encode`` and the cached one on the same split (self-calibrated, as the evaluator alone
calibrates) are compared at one dimension for every precision: the largest difference is
reported, so that a reader sees the cache changes nothing.

``retrieval``: REQUEST holds the corpus, the queries, ``top_k``, the rescore multipliers and the
repeats. The corpus and the queries are encoded (float32, normalised); exact float32 search
(``semantic_search_faiss``, ``corpus_precision="float32"``) is the reference; the corpus as
``ubinary`` codes in its binary index is searched with rescoring (``rescore_multiplier``), as its
documentation does. It reports each search's top ids, their exact float32 cosines with the query
(which decide, in bench_compressed.py, whether a result is among the exact top), queries per
second (the whole call, the index built beforehand, median of the repeats) and the bytes its
index holds.

It prints one JSON line: versions, threads and what the mode computed.
"""

import json
import os
import sys
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, __version__
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
from sentence_transformers.util.quantization import quantize_embeddings, semantic_search_faiss

os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local


class CachedEvaluator(EmbeddingSimilarityEvaluator):
    """Its evaluator, the embeddings of one encoding (``vectors``, rows by ``rows[sentence]``)
    truncated, normalised and quantised as ``model.encode`` does after its forward pass; int8
    and uint8 ranges from ``calibration`` (full-width rows, truncated alike), or, when None, from
    what is quantised, as ``encode`` computes them."""

    def __init__(self, pairs, vectors, rows, calibration=None, **options):
        super().__init__([a for a, _, _ in pairs], [b for _, b, _ in pairs], [label for *_, label in pairs], **options)
        self.vectors, self.rows, self.calibration = vectors, rows, calibration

    def embed_inputs(self, model, sentences, **kwargs):
        vectors = truncated(self.vectors[[self.rows[s] for s in sentences]], self.truncate_dim)
        if self.precision in (None, "float32"):
            return vectors
        calibration = None if self.calibration is None else truncated(self.calibration, self.truncate_dim)
        return quantize_embeddings(vectors, precision=self.precision, calibration_embeddings=calibration)


def truncated(vectors, dim):
    """The first ``dim`` coordinates, normalised: ``encode(truncate_dim=dim, normalize_embeddings=True)``."""
    vectors = vectors[:, :dim]
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def spearman(evaluator, model):
    metrics = evaluator(model)
    return float(metrics[evaluator.primary_metric])


def encode(model, sentences, request):
    return model.encode(sentences, batch_size=request["batch_size"], convert_to_numpy=True)


def cache_check(model, request, splits):
    """``{precision: |genuine - cached|}`` on the check split at the check dimension."""
    pairs = splits[request["check_split"]]
    sentences = list(dict.fromkeys(s for a, b, _ in pairs for s in (a, b)))
    vectors, rows = encode(model, sentences, request), {s: i for i, s in enumerate(sentences)}
    differences = {}
    for precision in request["precisions"]:
        options = {"truncate_dim": request["check_dim"], "precision": precision, "batch_size": request["batch_size"]}
        genuine = EmbeddingSimilarityEvaluator(
            [a for a, _, _ in pairs], [b for _, b, _ in pairs], [label for *_, label in pairs], **options
        )
        cached = CachedEvaluator(pairs, vectors, rows, **options)
        differences[precision] = abs(spearman(genuine, model) - spearman(cached, model))
    return differences


def score_task(model, request, splits):
    """``[{"dim", "precision", "splits": {split: spearman}}]`` of one task, on one encoding."""
    sentences = list(dict.fromkeys(s for pairs in splits.values() for a, b, _ in pairs for s in (a, b)))
    vectors = encode(model, sentences, request)
    rows = {s: i for i, s in enumerate(sentences)}
    results = []
    for dim in request["dims"]:
        for precision in request["precisions"]:
            scores = {
                split: spearman(
                    CachedEvaluator(pairs, vectors, rows, vectors, truncate_dim=dim, precision=precision), model
                )
                for split, pairs in splits.items()
            }
            results.append({"dim": dim, "precision": precision, "splits": scores})
    return results


def sts(model, request):
    tasks = request["tasks"]
    check = cache_check(model, request, tasks[request["check_task"]])
    return {
        "cache_check": check,
        "results": {task: score_task(model, request, splits) for task, splits in tasks.items()},
    }


def top_ids(hits):
    return [[hit["corpus_id"] for hit in row] for row in hits]


def exact_cosines(queries, corpus, ids):
    """Each query's float32 cosine with the corpus rows of its ids (its rescored scores are not
    cosines: the float query against the candidates' bits)."""
    return np.einsum("qd,qmd->qm", queries, corpus[np.asarray(ids)]).tolist()


def median_qps(search, queries, repeats):
    search(queries[:8])  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        search(queries)
        times.append(time.perf_counter() - started)
    return len(queries) / float(np.median(times))


def retrieval(model, request):
    """Exact float32 search, then the ubinary index with rescoring, on the same queries."""
    corpus, queries = encode(model, request["corpus"], request), encode(model, request["queries"], request)
    top_k, repeats = request["top_k"], request["repeats"]
    (hits, _, flat) = semantic_search_faiss(queries, corpus_embeddings=corpus, top_k=top_k, output_index=True)
    dim = int(corpus.shape[1])
    report = {
        "%d float32" % dim: {
            "k": dim,
            "codes": "float32",
            "ids": top_ids(hits),
            "cosines": exact_cosines(queries, corpus, top_ids(hits)),
            "qps": median_qps(lambda q: semantic_search_faiss(q, corpus_index=flat, top_k=top_k), queries, repeats),
            "index_bytes": flat.ntotal * flat.d * 4,
            "rescore_bytes": 0,
        }
    }
    codes = quantize_embeddings(corpus, precision="ubinary")
    for multiplier in request["rescore_multipliers"]:
        hits, _, binary = semantic_search_faiss(
            queries,
            corpus_embeddings=codes,
            corpus_precision="ubinary",
            top_k=top_k,
            rescore_multiplier=multiplier,
            output_index=True,
        )

        def search(q, index=binary, multiplier=multiplier):
            return semantic_search_faiss(
                q, corpus_index=index, corpus_precision="ubinary", top_k=top_k, rescore_multiplier=multiplier
            )

        report["%d ubinary x%d" % (dim, multiplier)] = {
            "k": dim,
            "codes": "ubinary",
            "ids": top_ids(hits),
            "cosines": exact_cosines(queries, corpus, top_ids(hits)),
            "qps": median_qps(search, queries, repeats),
            "index_bytes": binary.ntotal * binary.code_size,
            "rescore_bytes": 0,  # it rescores with the codes it searched
            "candidates": top_k * multiplier,
        }
    return {"searches": report}


def main(request_path, mode):
    # Answers go to the original standard output; whatever the libraries print goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    with open(request_path, encoding="utf-8") as stream:
        request = json.load(stream)
    torch.set_num_threads(request["threads"])
    model = SentenceTransformer(request["model"], device="cpu")
    model.max_seq_length = request["maxlen"]
    report = {"sts": sts, "retrieval": retrieval}[mode](model, request)
    report.update(versions="sentence-transformers %s, torch %s" % (__version__, torch.__version__))
    report.update(threads=torch.get_num_threads())
    print(json.dumps(report), file=answers, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

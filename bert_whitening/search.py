"""Retrieval with an encoder: ``eval-retrieval``, ``index`` and ``search`` as Python functions.

The command line only parses options into these calls. The benchmark definition, metrics and
index files are in `bert_whitening.retrieval` (numpy only); this module adds the encoder.
"""
import hashlib
import itertools
import logging
import os
import time

import numpy as np

from bert_whitening import retrieval
from bert_whitening.data import DataError, data_dir, read_sentences
from bert_whitening.errors import BertWhiteningError
from bert_whitening.evaluation import encode_splits, fit_statistics, load_tasks, settings, whitened_settings
from bert_whitening.whitening import Whitening

logger = logging.getLogger(__name__)


# --- eval-retrieval ----------------------------------------------------------------------


def _splits_to_encode(splits, split, fit_on):
    """The splits whose vectors are needed: all of them for ``fit_on="all"``, else the scored
    split (and train for ``fit_on="train"``)."""
    wanted = set(splits) if fit_on == "all" else {split, "train"} if fit_on == "train" else {split}
    return {name: pairs for name, pairs in splits.items() if name in wanted}


def evaluate_task(run, splits, split, requested, fit_on="all", files_statistics=None, distractors=(),
                  hnsw_m=retrieval.HNSW_M, allow_rank_deficient=False, where="task"):
    """Retrieval figures of every setting on one task's ``split``: its sentences are encoded
    once with ``run`` (a list of sentences to an array) and every setting is scored on the same
    vectors; ``fit_on`` and ``files_statistics`` as in `evaluation.fit_statistics`. Returns
    ``(results, counts)``."""
    if split not in splits:
        raise DataError("%s has no %s split (splits: %s)" % (where, split, ", ".join(splits)))
    bench = retrieval.build_benchmark(splits[split], distractors, where="%s.%s" % (where, split))
    if not bench.queries:
        raise DataError("%s.%s: no positive pairs, so no queries" % (where, split))
    encoded = encode_splits(run, _splits_to_encode(splits, split, fit_on))
    stats = fit_statistics(encoded, fit_on, files_statistics)
    first, second, _ = encoded[split]
    queries = first[bench.query_pairs]
    corpus = second[bench.corpus_pairs]
    if bench.distractors:
        corpus = np.concatenate([corpus, np.asarray(run(bench.distractors), dtype=np.float64)])
    results = []
    for setting, k, transform in whitened_settings(stats, requested, allow_rank_deficient)[0]:
        logger.info("%s: %s (k=%d) on %d queries x %d corpus", where, setting.label, k,
                    len(queries), len(corpus))
        scored = retrieval.score_setting(transform(queries), transform(corpus), bench.relevant, hnsw_m)
        results.append({"setting": setting.label, "n_components": k, "beta": setting.beta,
                        "gamma": setting.gamma, **scored})
    counts = {"pairs": len(splits[split]), "queries": len(bench.queries), "corpus": len(bench.corpus),
              "distractors": len(bench.distractors),
              "relevant": int(sum(len(r) for r in bench.relevant)), "fitted_on_vectors": stats.count}
    return results, counts


def evaluate_retrieval(spec, tasks, directory=None, split="test", n_components=(0, -1, 256, 128, 64),
                       betas=(1.0,), gammas=(1.0,), fit_on="all", distractor_files=(),
                       hnsw_m=retrieval.HNSW_M, batch_size=128, skip_bad_lines=False, on_task=None):
    """The ``eval-retrieval`` report: ``{"model", "pooling", ..., "tasks": {task: {"counts",
    "results": [per setting]}}}``. ``spec`` is a `bert_whitening.models.EncoderSpec` of the
    unwhitened encoder; its ``maxlen`` None means each task's default (`task_maxlen`).
    ``on_task(task, entry)`` is called as each task is done (the CLI prints its table)."""
    from bert_whitening.export import versions

    started = time.time()
    requested = settings(n_components, betas, gammas)
    distractors = list(retrieval.read_distractors(distractor_files, skip_bad_lines))
    encoder, loaded = load_tasks(spec, tasks, directory, n_components, batch_size, skip_bad_lines)
    report = {"model": encoder.model_identity, "pooling": encoder.pooling, "data_dir": data_dir(directory),
              "split": split, "fit_on": fit_on,
              "distractor_files": list(distractor_files), "cutoff": retrieval.CUTOFF,
              "hnsw": {"m": hnsw_m, "ef_construction": retrieval.HNSW_EF_CONSTRUCTION,
                       "ef_search": retrieval.HNSW_EF_SEARCH},
              "faiss_threads": _faiss_threads(), "tasks": {}, "versions": versions()}
    for task in loaded:
        results, counts = evaluate_task(task.encode, task.splits, split, requested, fit_on,
                                        task.statistics_of_files, distractors, hnsw_m,
                                        spec.allow_rank_deficient, where=task.name)
        report["tasks"][task.name] = {"maxlen": task.maxlen, "counts": counts, "results": results}
        if on_task:
            on_task(task.name, report["tasks"][task.name])
    report["versions"]["faiss-cpu"] = retrieval.faiss().__version__
    report["seconds"] = round(time.time() - started, 1)
    return report


def _faiss_threads():
    return retrieval.faiss().omp_get_max_threads()


def format_retrieval_table(task, entry):
    """One row per setting: quality, then FAISS flat size and speed, then HNSW."""
    counts = entry["counts"]
    lines = ["%s: %d queries, corpus %d (%d distractors), %d relevant pairs"
             % (task, counts["queries"], counts["corpus"], counts["distractors"], counts["relevant"]),
             "%-14s %4s %7s %7s %7s %9s %8s %8s %8s %9s %8s" % (
                 "setting", "k", "MRR@10", "R@1", "R@10", "index MB", "p50 ms", "p99 ms", "q/s@64",
                 "HNSW R@10", "HNSW p50")]
    for result in entry["results"]:
        flat, hnsw = result["flat"], result["hnsw"]
        lines.append("%-14s %4d %7.4f %7.4f %7.4f %9.2f %8.3f %8.3f %8.0f %9.4f %8.3f" % (
            result["setting"], result["dim"], result["mrr@10"], result["recall@1"], result["recall@10"],
            flat["index_bytes"] / 1e6, flat["p50_ms"], flat["p99_ms"], flat["qps_batch64"],
            hnsw["recall@10_vs_exact"], hnsw["p50_ms"]))
    return "\n".join(lines)


def plot_retrieval(report, path):
    """Per task: MRR@10, Recall@1 and Recall@10 against k (whitened settings with beta = gamma =
    1 as lines, raw as crosses at its dimension), and the FAISS flat latency against k."""
    from bert_whitening.plots import plt  # sets the headless backend

    tasks = list(report["tasks"])
    figure, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.6 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        results = report["tasks"][task]["results"]
        whitened = sorted((r for r in results if r["n_components"] and (r["beta"], r["gamma"]) == (1, 1)),
                          key=lambda r: r["dim"])
        raw = [r for r in results if not r["n_components"]]
        quality, speed = axes[row]
        for metric, colour in (("mrr@10", "C0"), ("recall@1", "C1"), ("recall@10", "C2")):
            quality.plot([r["dim"] for r in whitened], [r[metric] for r in whitened], marker="o",
                         color=colour, label=metric + " whitened")
            quality.scatter([r["dim"] for r in raw], [r[metric] for r in raw], marker="x", s=60,
                            color=colour, label=metric + " raw")
        quality.set(title="%s: quality (exact cosine)" % task, xlabel="dimensions k", ylabel="score")
        for label, entries, marker in (("whitened", whitened, "o"), ("raw", raw, "x")):
            speed.plot([r["dim"] for r in entries], [r["flat"]["p50_ms"] for r in entries],
                       marker=marker, color="C0", label="one query, p50 (%s)" % label)
            speed.plot([r["dim"] for r in entries], [1e3 * 64 / r["flat"]["qps_batch64"] for r in entries],
                       marker=marker, color="C3", label="batch of 64 (%s)" % label)
        speed.set(title="%s: FAISS IndexFlatIP latency" % task, xlabel="dimensions k", ylabel="ms")
        for axis in (quality, speed):
            axis.grid(alpha=0.3)
            axis.legend(fontsize="small")
    figure.suptitle("%s, %s pooling, split %s" % (report["model"]["name"], report["pooling"],
                                                   report["split"]))
    figure.tight_layout()
    with open(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=80)
    plt.close(figure)


# --- index and search --------------------------------------------------------------------


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encoder_record(spec, whitening_path=None):
    """What an index records of the encoder that made its vectors, and its dimension: model
    identity, pooling, maxlen, case, whitening file (path and sha256) and k."""
    from bert_whitening.checkpoints import find_model

    identity = find_model(spec.model).identity(spec.model_type)
    k = spec.whitening.components(spec.n_components, spec.allow_rank_deficient) if spec.whitening else 0
    whitening = None
    if spec.whitening is not None:
        if spec.whitening.dim != identity["hidden_size"]:
            raise BertWhiteningError("%s has dimension %d but the model's hidden size is %d"
                             % (whitening_path, spec.whitening.dim, identity["hidden_size"]))
        whitening = {"path": os.path.abspath(whitening_path), "sha256": file_sha256(whitening_path)}
    record = {"model": identity,
              "model_dir": None if spec.model in (None, "minilm") else os.path.abspath(spec.model),
              "pooling": spec.pooling, "maxlen": spec.maxlen, "lowercase": spec.lowercase,
              "whitening": whitening, "n_components": k,
              "allow_rank_deficient": spec.allow_rank_deficient}
    return record, k or identity["hidden_size"]


def build_index(spec, output, inputs=(), whitening_path=None, hnsw_m=0, from_vectors=None,
                from_beam=None, batch_size=128):
    """Write an index directory of the sentence files ``inputs`` encoded with ``spec`` (a
    normalised `EncoderSpec`), or of vectors already encoded: ``from_vectors`` (a ``.npy``; keys
    from ``inputs`` when given, else its rows) or ``from_beam`` (a ``beam-encode`` shard
    pattern). Returns the number of vectors."""
    if not spec.normalize:
        raise BertWhiteningError("an index holds L2-normalised vectors: --no-normalize cannot be used")
    record, dim = encoder_record(spec, whitening_path)
    with retrieval.IndexWriter(output, dim, record, hnsw_m) as writer:
        if from_beam:
            from bert_whitening.beam import read_encoded

            keys, vectors = read_encoded(from_beam)
            if not keys:
                raise DataError("%s: no beam-encode shards match" % from_beam)
            writer.add(vectors, [(os.path.abspath(path), line) for path, line in keys])
        elif from_vectors:
            chunks = (vectors for _, vectors in retrieval.npy_chunks(from_vectors))
            keys = retrieval.line_keys(inputs) if inputs else (
                (os.path.abspath(from_vectors), row) for row in itertools.count(1))
            retrieval.add_keyed_chunks(writer, chunks, keys)
        else:
            from bert_whitening.encoding import encode_stream, progress_bar

            if not inputs:
                raise BertWhiteningError("nothing to index: give sentence files, --from-vectors "
                                         "or --from-beam")
            encoder = spec.build()
            with progress_bar() as bar:
                for path in inputs:
                    chunks = encode_stream(encoder, read_sentences(path, "lines"), batch_size, bar)
                    retrieval.add_keyed_chunks(writer, chunks, retrieval.line_keys([path]))
        count = writer.index.ntotal
    logger.info("indexed %d vectors of dimension %d into %s (%s)", count, dim, output,
                "HNSW, M=%d" % hnsw_m if hnsw_m else "exact IndexFlatIP")
    return count


def query_spec(record, model=None, model_type=None, pooling=None, whitening_path=None):
    """The `EncoderSpec` that an index's ``record`` names, refusing any given override (model,
    pooling, whitening file) that differs from it: a query must be encoded as the corpus was."""
    from bert_whitening.checkpoints import find_model
    from bert_whitening.models import EncoderSpec

    model = model or record["model_dir"]
    identity = find_model(model).identity(model_type or record["model"]["type"])
    if identity != record["model"]:
        raise BertWhiteningError("the query model %s is not the index's (%s, vocabulary %s...): refused"
                         % (identity["name"], record["model"]["name"],
                            record["model"]["vocab_sha256"][:12]))
    if pooling and pooling != record["pooling"]:
        raise BertWhiteningError("the index was built with %s pooling, not %s: refused"
                         % (record["pooling"], pooling))
    whitening = None
    if record["whitening"] or whitening_path:
        if not record["whitening"]:
            raise BertWhiteningError("the index holds unwhitened vectors; a query with --whitening "
                             "would not match them: refused")
        whitening_path = whitening_path or record["whitening"]["path"]
        if not os.path.exists(whitening_path):
            raise BertWhiteningError("%s: the index's whitening file is gone; pass --whitening with a "
                             "copy (sha256 %s)" % (whitening_path, record["whitening"]["sha256"]))
        if file_sha256(whitening_path) != record["whitening"]["sha256"]:
            raise BertWhiteningError("%s is not the whitening the index was built with (sha256 differs "
                             "from %s): refused" % (whitening_path, record["whitening"]["sha256"]))
        whitening = Whitening.load(whitening_path)
    return EncoderSpec(model=model, model_type=identity["type"], pooling=record["pooling"],
                       maxlen=record["maxlen"], lowercase=record["lowercase"], whitening=whitening,
                       n_components=record["n_components"], normalize=True,
                       allow_rank_deficient=record["allow_rank_deficient"])


def search(directory, queries, top_k=10, model=None, model_type=None, pooling=None,
           whitening_path=None, batch_size=128):
    """For each query, its ``top_k`` nearest corpus lines: ``[{"query", "hits": [{"rank",
    "score" (cosine), "file", "line", "text"}]}]``. The encoder is the one the index records."""
    from bert_whitening.encoding import encode

    record = retrieval.read_metadata(directory)
    if record.get("model") is None:
        raise BertWhiteningError("%s records no encoder, so text queries cannot be encoded" % directory)
    encoder = query_spec(record, model, model_type, pooling, whitening_path).build()
    if encoder.dim != record["dim"]:
        raise BertWhiteningError("the query encoder gives %d dimensions, the index holds %d"
                         % (encoder.dim, record["dim"]))
    vectors = encode(encoder, list(queries), batch_size, progress=False)
    scores, ids = retrieval.read_index(directory).search(np.ascontiguousarray(vectors), top_k)
    keys = retrieval.read_keys(directory, set(ids.ravel().tolist()))
    found = [[keys[i] for i in row if i >= 0] for row in ids]  # -1: fewer rows than top_k
    texts = retrieval.key_texts([key for row in found for key in row])
    return [{"query": query, "hits": [
        {"rank": rank + 1, "score": float(score), "file": key[0], "line": key[1],
         "text": texts.get(key)} for rank, (key, score) in enumerate(zip(row, row_scores, strict=False))]}
            for query, row, row_scores in zip(queries, found, scores, strict=True)]


def format_hits(results):
    lines = []
    for result in results:
        lines.append("query: %s" % result["query"])
        for hit in result["hits"]:
            shown = hit["text"] if hit["text"] is not None else "(%s:%d)" % (hit["file"], hit["line"])
            lines.append("  %2d  %.4f  %s" % (hit["rank"], hit["score"], shown))
    return "\n".join(lines)


def corpus_for_export(directory, encoder, whitening_path=None):
    """The vectors of an index directory for ``export --corpus``, and what the export records of
    them; refused unless the index was made by this encoder (model, pooling, whitening, k)."""
    record = retrieval.read_metadata(directory)
    whitening = file_sha256(whitening_path) if whitening_path else None
    made_by = (record["model"], record["pooling"], record["n_components"],
               (record["whitening"] or {}).get("sha256"))
    if made_by != (encoder.model_identity, encoder.pooling, encoder.n_components, whitening):
        raise BertWhiteningError("%s was indexed with %s, %s pooling, k=%s, whitening %s; the export is "
                         "%s, %s pooling, k=%s, whitening %s: refused" % (
                             directory, record["model"]["name"], record["pooling"],
                             record["n_components"], (made_by[3] or "none")[:12],
                             encoder.model_identity["name"], encoder.pooling, encoder.n_components,
                             (whitening or "none")[:12]))
    vectors = retrieval.corpus_vectors(directory)
    logger.info("serve_search corpus: %d x %d float32 = %.1f MB resident in the server",
                len(vectors), vectors.shape[1], vectors.nbytes / 1e6)
    return vectors, {"index": os.path.abspath(directory), "count": len(vectors),
                     "dim": int(vectors.shape[1]), "keys": retrieval.KEYS_FILE}

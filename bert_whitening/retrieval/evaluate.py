"""``eval-retrieval``: the retrieval benchmark (`bert_whitening.retrieval.benchmark`) of pair
tasks, every whitening setting scored on one encoding of each task, with FAISS sizes and timings
(`bert_whitening.retrieval.faiss_indexes`)."""

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from bert_whitening.arguments import options_of, path_list, text
from bert_whitening.codes import bytes_per_vector, code_list, quantizer
from bert_whitening.config import EncoderConfig, versions
from bert_whitening.data import DataError, data_dir
from bert_whitening.errors import BertWhiteningError
from bert_whitening.evaluation import (
    EvalOptions,
    Task,
    encode_splits_together,
    fit_key,
    fit_statistics,
    load_tasks,
    named_task,
    whitened_settings,
)
from bert_whitening.io.bounded import check_memory
from bert_whitening.retrieval.benchmark import (
    CUTOFF,
    build_benchmark,
    code_search,
    positive_labels,
    positive_rule,
    read_distractors,
    retrieval_metrics,
)
from bert_whitening.retrieval.faiss_indexes import (
    BATCH_QUERIES,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    QPS_BATCH,
    check_hnsw_m,
    faiss,
    score_setting,
)

logger = logging.getLogger(__name__)


def _splits_to_encode(splits, split, fit_on):
    """The splits whose vectors are needed: all of them for ``fit_on="all"``, else the scored
    split (and train for ``fit_on="train"``)."""
    wanted = set(splits) if fit_on == "all" else {split, "train"} if fit_on == "train" else {split}
    return {name: pairs for name, pairs in splits.items() if name in wanted}


def evaluate_task(
    task: Task,
    split: str,
    requested: Sequence,
    fit_on: str | Sequence[str] = "all",
    distractors: Sequence[str] = (),
    hnsw_m: int = HNSW_M,
    allow_rank_deficient: bool = False,
    codes: Sequence[str] = ("float32",),
) -> dict[str, tuple[list[dict], dict[str, int]]]:
    """Retrieval figures of every setting in each of ``codes`` on a task's ``split``, per pooling:
    sentences (and distractors) encoded once, every pooling in one pass, every setting scored on
    the same vectors; ``fit_on`` as `evaluation.fit_statistics`. ``{pooling: (results, counts)}``."""
    from bert_whitening.encoding import encode_together

    splits = task.splits
    _check_split(task, split)
    rule = _queries_rule([label for _, _, label in splits[split]], "%s.%s" % (task.name, split))
    bench = build_benchmark(splits[split], distractors, where="%s.%s" % (task.name, split))
    logger.info("%s.%s: the queries are the first sentences of the %s", task.name, split, rule)
    queried = set(bench.queries).intersection(bench.distractors)
    if queried:
        logger.warning(
            "%s.%s: %d distractors are queries too: each such query finds itself, not relevant, at cosine 1",
            task.name,
            split,
            len(queried),
        )
    _check_memory(task, bench, [setting.n_components for setting in requested])
    encoded = encode_splits_together(task.encoders, _splits_to_encode(splits, split, fit_on), task.read.batch_size)
    extra = {pooling: np.zeros((0, encoder.dim)) for pooling, encoder in task.encoders.items()}
    if bench.distractors:
        vectors = encode_together(list(task.encoders.values()), bench.distractors, task.read.batch_size)
        extra = dict(zip(task.encoders, vectors, strict=True))
    found = {}
    for pooling, pairs in encoded.items():
        where = task.label(pooling)
        stats = fit_statistics(pairs, fit_on, functools.partial(task.statistics_from_files, pooling=pooling))
        first, second, _ = pairs[split]
        queries = first[bench.query_pairs]
        corpus = np.concatenate([second[bench.corpus_pairs], np.asarray(extra[pooling], dtype=np.float64)])
        results = []
        prepared, fitted = whitened_settings(stats, requested, allow_rank_deficient)
        for setting, k, transform in prepared:
            logger.info("%s: %s (k=%d) on %d queries x %d corpus", where, setting.label, k, len(queries), len(corpus))
            head = {"setting": setting.label, "n_components": k, "beta": setting.beta, "gamma": setting.gamma}
            whitening = fitted[fit_key(setting)][0] if setting.n_components else None
            coded = _scored_codes(codes, whitening, stats, transform(queries), transform(corpus), bench, hnsw_m)
            results.extend({**head, **scored} for scored in coded)
        counts = {
            "pairs": len(splits[split]),
            "queries": len(bench.queries),
            "corpus": len(bench.corpus),
            "distractors": len(bench.distractors),
            "relevant": int(sum(len(r) for r in bench.relevant)),
            "fitted_on_vectors": stats.count,
        }
        found[pooling] = (results, counts)
    return found


def _scored_codes(codes, whitening, stats, queries, corpus, bench, hnsw_m):
    """One result of a setting's unit ``queries`` and ``corpus`` for each of ``codes``: float32
    by `score_setting` (exact cosine, FAISS sizes and timings); int8 and binary ranked by the
    cosine of their codes (`code_search`), their int8 scales the setting's ``whitening`` (for
    raw vectors, one fitted on ``stats``). Each with its ``codes`` and ``bytes`` a vector."""
    dim = queries.shape[1]
    found = []
    for code in codes:
        if code == "float32":
            scored = score_setting(queries, corpus, bench.relevant, hnsw_m)
        else:
            scored = _code_metrics(_setting_quantizer(code, dim, whitening, stats), queries, corpus, bench)
        found.append({"codes": code, "bytes": bytes_per_vector(code, dim), **scored})
    return found


def _setting_quantizer(code, dim, whitening, stats):
    """The `bert_whitening.codes.Quantizer` of a setting's vectors of ``dim`` in ``code``."""
    if code != "int8":
        return quantizer(code, dim)
    if whitening is None:  # raw vectors: the spread of each raw coordinate over the fitted sample
        from bert_whitening.whitening import fit_whitening

        return fit_whitening(stats, allow_rank_deficient=True).quantizer(0, code, allow_rank_deficient=True)
    return whitening.quantizer(dim, code, allow_rank_deficient=True)


def _code_metrics(coder, queries, corpus, bench):
    ids, _ = code_search(coder, queries, corpus)
    result = retrieval_metrics(ids, bench.relevant)
    result.update(queries=len(queries), corpus=len(corpus), dim=corpus.shape[1])
    return result


def _check_memory(task, bench, ks):
    """Refuse a benchmark whose corpus could not be scored in the memory this process may use
    (`check_memory`), before anything is encoded: the distractors' float32 vectors of every
    pooling (encoded together) are held while each pooling's corpus is scored, in float64, and
    each setting's (``ks``: the ``n_components`` asked; 0 or negative keep every dimension)
    transformed float64 corpus beside its float32 copy and its flat and HNSW indexes (four bytes
    a dimension each), at the largest such ``k``. A lower bound (HNSW's links, the queries and
    the search's scores are left out), so that only what cannot fit is refused, by far the
    likelier with a large ``--distractors`` file than an out-of-memory kill after hours of
    encoding."""
    dims = [encoder.dim for encoder in task.encoders.values()]
    largest = max(dims)
    k = max(largest if n <= 0 else min(n, largest) for n in ks)
    corpus = len(bench.corpus)
    check_memory(
        "scoring a corpus of %d sentences (%d distractors)" % (corpus, len(bench.distractors)),
        {
            "of the distractors' float32 vectors, %d columns" % sum(dims): 4 * len(bench.distractors) * sum(dims),
            "of the corpus in float64": 8 * corpus * largest,
            "of a setting's k=%d corpus: float64, float32, flat and HNSW indexes" % k: (8 + 3 * 4) * corpus * k,
        },
        DataError,
        "give fewer distractors" if bench.distractors else "",
    )


def _check_split(task, split):
    if split not in task.splits:
        raise DataError("%s has no %s split (splits: %s)" % (task.name, split, ", ".join(task.splits)))


def _scorable(scored):
    """A check of each split (`load_tasks`) refusing a ``scored`` split that cannot be scored:
    labels on neither retrieval scale, or no positive pair to make a query of."""

    def check(split, pairs, file):
        if split == scored:
            _queries_rule([label for _, _, label in pairs], file)

    return check


def _queries_rule(labels, where):
    """Which pairs of ``labels`` are positive, in words (`positive_rule`); labels `positive_labels`
    refuses, or that give no positive pair (no query to make), are refused naming ``where``."""
    rule = positive_rule(labels)
    if not positive_labels(labels, where).any():
        raise DataError("%s: no positive pairs, so no queries (positive: %s)" % (where, rule))
    return rule


#: The settings ``eval-retrieval`` scores unless told: raw, all, and three truncations.
RETRIEVAL_N_COMPONENTS = (0, -1, 256, 128, 64)


@dataclasses.dataclass(frozen=True)
class RetrievalOptions:
    """What only ``eval-retrieval`` needs beside its `EvalOptions`, checked once when built:
    the ``split`` the benchmark is made from, the sentence files added to every corpus
    (``distractor_files``, kept as a tuple) and the HNSW index's ``hnsw_m`` compared with exact
    search, and the ``codes`` each setting is scored in (`bert_whitening.codes.code_list`: a
    tuple; float32 by exact cosine with FAISS sizes and timings, int8 and binary by the cosine
    of their codes)."""

    split: str = "test"
    distractor_files: Sequence[str] = ()
    hnsw_m: int = HNSW_M
    codes: Sequence[str] = ("float32",)

    def __post_init__(self):
        text(self.split, "split")
        object.__setattr__(self, "distractor_files", tuple(path_list(self.distractor_files, "distractor_files")))
        check_hnsw_m(self.hnsw_m)
        object.__setattr__(self, "codes", code_list(self.codes))


def evaluate_retrieval(
    config: EncoderConfig,
    tasks: Sequence[str],
    options: EvalOptions = EvalOptions(n_components=RETRIEVAL_N_COMPONENTS),
    retrieval: RetrievalOptions = RetrievalOptions(),
    on_task: Callable[[str, dict], None] | None = None,
) -> dict | list[dict]:
    """The ``eval-retrieval`` report: ``{"model", "pooling", ..., "tasks": {task: {"counts",
    "results": [per setting]}}}``. ``config`` is a `bert_whitening.config.EncoderConfig` of the
    unwhitened encoder; its ``maxlen`` None means each task's default (`task_maxlen`).
    ``options``: an `EvalOptions` of whitenings alone (every combination of its settings is
    scored; its ``read`` reads the task files, ``fit_on`` files and distractors);
    ``retrieval``: a `RetrievalOptions`. ``on_task(title, entry)`` is called as each task is
    done (the CLI prints its table). With ``options.poolings``, every pooling is scored on one
    encoding of each task and of the distractors, and a list of reports is returned, one per
    pooling in its order."""
    started = time.time()
    requested = _whitenings(options, retrieval)
    distractors = list(read_distractors(retrieval.distractor_files, options.read.skip_bad_lines))
    ks = [setting.n_components for setting in requested]
    split = retrieval.split
    encoders, loaded = load_tasks(
        config, tasks, options.directory, ks, options.read, options.poolings, _scorable(split), options.fit_on
    )
    for task in loaded:  # before any task is encoded: a later one's was found once the first was scored
        _check_split(task, split)
    reports = {pooling: _report_head(encoder, pooling, options, retrieval) for pooling, encoder in encoders.items()}
    for task in loaded:
        with named_task(task.name):
            found = evaluate_task(
                task,
                split,
                requested,
                options.fit_on,
                distractors,
                retrieval.hnsw_m,
                config.allow_rank_deficient,
                retrieval.codes,
            )
        for pooling, (results, counts) in found.items():
            entry = reports[pooling]["tasks"][task.name] = {"maxlen": task.maxlen, "counts": counts, "results": results}
            if on_task:
                on_task(task.label(pooling), entry)
    for report in reports.values():
        report["seconds"] = round(time.time() - started, 1)
    return list(reports.values()) if options.poolings else reports[config.pooling]


def _whitenings(options, retrieval):
    """The settings of ``options``, refused unless an `EvalOptions` of whitenings and a
    `RetrievalOptions` were given: a benchmark scores no flow."""
    options_of(EvalOptions, options)
    options_of(RetrievalOptions, retrieval, "retrieval")
    if tuple(options.methods) != ("whitening",):
        raise BertWhiteningError(
            "eval-retrieval scores whitenings: methods must be ('whitening',), got %s" % (options.methods,)
        )
    return options.settings


def _report_head(encoder, pooling, options, retrieval):
    """One pooling's report before any task: what made it, in the order its JSON shows."""
    return {
        "model": encoder.model_identity,
        "pooling": pooling,
        "data_dir": data_dir(options.directory),
        "split": retrieval.split,
        "fit_on": options.reported_fit_on,
        "distractor_files": list(retrieval.distractor_files),
        "cutoff": CUTOFF,
        "codes": list(retrieval.codes),
        "hnsw": {"m": retrieval.hnsw_m, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH},
        "faiss_threads": _faiss_threads(),
        "tasks": {},
        "versions": dict(versions(), **{"faiss-cpu": faiss().__version__}),
    }


def _faiss_threads():
    return faiss().omp_get_max_threads()


def format_retrieval_table(task: str, entry: dict) -> str:
    """One row per setting and code: quality and bytes a vector, then (float32) FAISS flat size
    and speed, then HNSW; a code's row, ranked by the cosine of its codes, has no FAISS columns."""
    counts = entry["counts"]
    lines = [
        "%s: %d queries, corpus %d (%d distractors), %d relevant pairs"
        % (task, counts["queries"], counts["corpus"], counts["distractors"], counts["relevant"]),
        "%-14s %4s %-7s %5s %7s %7s %7s %9s %8s %8s %8s %9s %8s"
        % (
            "setting",
            "dim",
            "codes",
            "bytes",
            "MRR@10",
            "R@1",
            "R@10",
            "index MB",
            "p50 ms",
            "p99 ms",
            "q/s@%d" % BATCH_QUERIES,
            "HNSW R@10",
            "HNSW p50",
        ),
    ]
    for result in entry["results"]:
        flat, hnsw = result.get("flat"), result.get("hnsw")
        faiss_columns = (
            "%9.2f %8.3f %8.3f %8.0f %9.4f %8.3f"
            % (
                flat["index_bytes"] / 1e6,
                flat["p50_ms"],
                flat["p99_ms"],
                flat[QPS_BATCH],
                hnsw["recall@10_vs_exact"],
                hnsw["p50_ms"],
            )
            if flat
            else "%9s %8s %8s %8s %9s %8s" % (("-",) * 6)
        )
        lines.append(
            "%-14s %4d %-7s %5d %7.4f %7.4f %7.4f %s"
            % (
                result["setting"],
                result["dim"],
                result.get("codes", "float32"),
                result.get("bytes", 4 * result["dim"]),
                result["mrr@10"],
                result["recall@1"],
                result["recall@10"],
                faiss_columns,
            )
        )
    return "\n".join(lines)

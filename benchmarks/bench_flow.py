"""BERT-flow beside whitening on one encoding: Spearman, fit time and the memory each fit adds.

    python benchmarks/bench_flow.py [--task STS-B ...] [--seeds 0,1,2] [--json out/flow.json]
    python benchmarks/bench_flow.py --summary out/flow.json

With the built-in all-MiniLM-L6-v2 (or --model), first-last-avg, maxlen 64 (128 for PAWSX), each
task of ../shared/data/senteval_cn is encoded once, and raw, whitening (--n-components) and one
BERT-flow per seed (bohanli/BERT-flow's configuration, see bert_whitening/flow.py) are fitted on
all its splits and scored on the same vectors, as ``eval --method whitening,flow`` would. Then
each method is fitted again on the same vectors in a child process, whose peak resident set
(VmHWM, reset just before the fit) less its resident set before the fit is the memory that fit
adds; the flow's child has TensorFlow imported before, and that import's size is printed apart.
The last table sums up every task: test Spearman (the last split where a task has no test),
the flows' mean and range over the seeds, and each method's fit time and added memory.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")


def resident_mib(key):
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no %s in /proc/self/status (this benchmark needs Linux)" % key)


def child(method, path, seed):
    """Fit one method on the saved vectors; the memory it adds and the time it takes."""
    started_rss = resident_mib("VmRSS")
    if method == "flow":
        from bert_whitening.flow import fit_flow
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    imported_rss = resident_mib("VmRSS")
    vectors = np.load(path)
    before_rss = resident_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as stream:
        stream.write("5")  # VmHWM := VmRSS, so the peak below is the fit's
    start = time.perf_counter()
    if method == "flow":
        fit_flow(vectors, seed=seed, progress=False)
    else:
        fit_whitening(WhiteningStats().update(vectors))
    return {
        "seconds": time.perf_counter() - start,
        "added_mib": resident_mib("VmHWM") - before_rss,
        "imports_mib": imported_rss - started_rss,
    }


def run_child(method, path, seed=0):
    output = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", method, path, str(seed)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def summary(report):
    """One line per task: test Spearman of raw, whitening and the flows (mean and range over the
    seeds), then each method's fit time and added memory in the child processes."""
    lines = [
        "%-9s %7s %7s %7s %16s   %-26s %s"
        % (
            "test",
            "raw",
            "k=all",
            "k=256",
            "flow mean (range)",
            "fit s: whitening / flow",
            "adds MiB: whitening / flow",
        )
    ]
    for name, task in report["tasks"].items():
        split = "test" if "test" in task["counts"] else list(task["counts"])[-1]
        scores = {r["setting"]: r["splits"][split] for r in task["results"]}
        flows = [v for k, v in scores.items() if k.startswith("flow")]
        children = task["children"]
        flow_children = [v for k, v in children.items() if k.startswith("flow")]
        lines.append(
            "%-9s %7.4f %7.4f %7.4f %7.4f (%.4f-%.4f)   %6.2f / %5.1f (%.1f-%.1f)     %5.0f / %.0f"
            % (
                name,
                scores["raw"],
                scores["k=all"],
                scores["k=256"],
                np.mean(flows),
                min(flows),
                max(flows),
                children["whitening"]["seconds"],
                np.mean([c["seconds"] for c in flow_children]),
                min(c["seconds"] for c in flow_children),
                max(c["seconds"] for c in flow_children),
                children["whitening"]["added_mib"],
                np.mean([c["added_mib"] for c in flow_children]),
            )
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", help="repeatable (default: STS-B)")
    parser.add_argument("--model", help="model directory (default: the built-in all-MiniLM-L6-v2)")
    parser.add_argument("--pooling", default="first-last-avg")
    parser.add_argument("--seeds", default="0", help="flow seeds, comma-separated")
    parser.add_argument("--n-components", default="0,-1,256")
    parser.add_argument("--data-dir", default=SHARED)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--summary", metavar="JSON", help="print the summary of a report written by --json, and stop")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summary:
        with open(args.summary, encoding="utf-8") as stream:
            print(summary(json.load(stream)))
        return
    if args.child:
        method, path, seed = args.child
        print(json.dumps(child(method, path, int(seed))))
        return

    from bert_whitening.config import EncoderConfig, versions
    from bert_whitening.evaluation import (
        encode_splits,
        evaluate,
        fit_statistics_and_vectors,
        format_table,
        load_tasks,
        settings,
        write_report,
    )

    seeds = [int(seed) for seed in args.seeds.split(",")]
    n_components = [int(k) for k in args.n_components.split(",")]
    requested = settings(n_components, methods=("whitening", "flow"), seeds=seeds)
    started = time.time()
    encoders, loaded = load_tasks(
        EncoderConfig(args.model, pooling=args.pooling, maxlen=None),
        args.task or ["STS-B"],
        args.data_dir,
        n_components,
    )
    encoder = encoders[args.pooling]
    report = {
        "model": encoder.model_identity,
        "pooling": encoder.pooling,
        "data_dir": args.data_dir,
        "fit_on": "all",
        "tasks": {},
        "versions": versions(),
        "cpus": os.cpu_count(),
    }
    for task in loaded:
        start = time.perf_counter()
        encoded = encode_splits(task.encode, task.splits)
        encode_seconds = time.perf_counter() - start
        stats, vectors = fit_statistics_and_vectors(encoded)
        results, _ = evaluate(encoded, stats, requested, vectors=vectors)
        with tempfile.TemporaryDirectory() as workdir:
            path = os.path.join(workdir, "vectors.npy")
            np.save(path, vectors)
            memory = {"whitening": run_child("whitening", path)}
            memory.update({"flow s=%d" % seed: run_child("flow", path, seed) for seed in seeds})
        report["tasks"][task.name] = {
            "maxlen": task.maxlen,
            "counts": {split: len(pairs) for split, pairs in task.splits.items()},
            "fitted_on_vectors": len(vectors),
            "encode_seconds": encode_seconds,
            "results": results,
            "children": memory,
        }
        print(format_table(task.name, report))
        print(
            "%s: %d vectors encoded in %.0f s; in a child process on the same vectors:"
            % (task.name, len(vectors), encode_seconds)
        )
        for name, figures in memory.items():
            print(
                "  %-10s fit %7.2f s, adds %7.1f MiB (imports %.0f MiB)"
                % (name, figures["seconds"], figures["added_mib"], figures["imports_mib"])
            )
    report["seconds"] = round(time.time() - started, 1)
    print(summary(report))
    write_report(report, args.json)


if __name__ == "__main__":
    main()

"""Fitting whitening statistics on more vectors than fit in memory, in bounded memory.

    python benchmarks/bench_fit.py [--rows 1000000] [--dim 768] [--shards 4]

1. Writes ROWS x DIM float32 vectors (a large mean and a decaying spectrum, like BERT vectors)
   into a .npy file under --workdir, block by block (3 GB at the defaults).
2. In a child process, so that its peak RSS is its own: `WhiteningStats.update_from_npy` over
   the file, then `fit_whitening`; prints vectors/s and the peak RSS.
3. Side by side, in another child: the original procedure (np.load the vectors, np.cov,
   SVD) on the first --original-rows rows, whose memory grows with the number of vectors.
4. Checks, relative to the largest entry: the streamed mean and covariance equal those of
   the --shards row ranges fitted separately and merged (1e-9), and the streamed statistics of
   the first --original-rows rows equal np.mean / np.cov of those rows held in memory (1e-9).
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
BLOCK = 16384


def generate(path, rows, dim, seed=0):
    """BERT-like float32 vectors written block by block: mean about 3, spectrum 4 decades."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    mixing = (np.geomspace(2.0, 0.02, dim)[:, None] * rotation).astype(np.float32)
    mean = (3.0 * rng.normal(size=dim)).astype(np.float32)
    output = np.lib.format.open_memmap(path, "w+", np.float32, (rows, dim))
    for start in range(0, rows, BLOCK):
        count = min(BLOCK, rows - start)
        output[start : start + count] = rng.standard_normal((count, dim), np.float32) @ mixing + mean
    output.flush()
    del output


def peak_rss_mib():
    """This process's peak resident set (VmHWM). Not getrusage's ru_maxrss: Linux carries that
    over from the parent across fork and exec, so a child would report the parent's peak."""
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (this benchmark needs Linux)")


def child_streamed(path, result):
    """Stream the file through WhiteningStats and fit; save the statistics for the checks."""
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    before = peak_rss_mib()
    start = time.perf_counter()
    stats = WhiteningStats().update_from_npy(path)
    accumulated = time.perf_counter() - start
    fit_whitening(stats)
    fitted = time.perf_counter() - start
    np.savez(result, count=stats.count, mean=stats.mean, covariance=stats.covariance)
    return {
        "seconds": fitted,
        "accumulate_seconds": accumulated,
        "rows": stats.count,
        "rss_before": before,
        "peak_rss": peak_rss_mib(),
    }


def child_original(path, rows):
    """The original chn/utils.py compute_kernel_bias on the first ``rows`` vectors, in memory."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from reference import original_kernel_bias

    before = peak_rss_mib()
    start = time.perf_counter()
    vectors = np.array(np.load(path, mmap_mode="r")[:rows])  # the vectors held as one array
    original_kernel_bias([vectors])
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": rows, "rss_before": before, "peak_rss": peak_rss_mib()}


def run_child(*arguments):
    output = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child"] + list(arguments),
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument(
        "--original-rows", type=int, default=200_000, help="rows for the in-memory original and the np.cov check"
    )
    parser.add_argument("--workdir", help="where the .npy goes (default: a temporary directory)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, argument = args.child
        figures = child_streamed(path, argument) if kind == "streamed" else child_original(path, int(argument))
        print(json.dumps(figures))
        return

    from bert_whitening.whitening import WhiteningStats

    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        path = os.path.join(workdir, "vectors.npy")
        start = time.perf_counter()
        generate(path, args.rows, args.dim)
        print(
            "generated %d x %d float32 vectors (%.2f GB) in %.0f s: %s"
            % (args.rows, args.dim, os.path.getsize(path) / 1e9, time.perf_counter() - start, path)
        )
        streamed = run_child("streamed", path, os.path.join(workdir, "streamed.npz"))
        original = run_child("original", path, str(args.original_rows))
        with np.load(os.path.join(workdir, "streamed.npz")) as saved:
            mean, covariance = saved["mean"], saved["covariance"]

        vectors = np.load(path, mmap_mode="r")
        bounds = np.linspace(0, args.rows, args.shards + 1).astype(int)
        merged = WhiteningStats()
        for low, high in zip(bounds[:-1], bounds[1:], strict=True):
            merged.merge(WhiteningStats().update(vectors[low:high]))
        subsample = np.asarray(vectors[: args.original_rows], dtype=np.float64)
        streamed_subsample = WhiteningStats().update(vectors[: args.original_rows])
        checks = {
            "merged shards, mean": relative_error(merged.mean, mean),
            "merged shards, covariance": relative_error(merged.covariance, covariance),
            "np.mean of the first %d rows" % args.original_rows: relative_error(
                streamed_subsample.mean, subsample.mean(axis=0)
            ),
            "np.cov of the first %d rows" % args.original_rows: relative_error(
                streamed_subsample.covariance, np.cov(subsample.T)
            ),
        }
        del vectors

    print("%-44s %8s %10s %12s %14s" % ("procedure", "vectors", "seconds", "vectors/s", "peak RSS MiB"))
    for name, figures in (
        ("bert-whitening (update_from_npy + fit)", streamed),
        ("original (np.load + np.cov + SVD, in memory)", original),
    ):
        print(
            "%-44s %8d %10.1f %12.0f %14.0f"
            % (name, figures["rows"], figures["seconds"], figures["rows"] / figures["seconds"], figures["peak_rss"])
        )
    per_row = (original["peak_rss"] - original["rss_before"]) * 2**20 / original["rows"]
    print(
        "original's memory grows by %.0f bytes per vector: %.1f GiB for %d vectors"
        % (per_row, per_row * args.rows / 2**30, args.rows)
    )
    print()
    for name, error in checks.items():
        print("relative error vs %-36s %.2e  %s" % (name, error, "met" if error <= 1e-9 else "NOT MET"))
    print(
        "peak RSS < 2 GiB: %.0f MiB  %s" % (streamed["peak_rss"], "met" if streamed["peak_rss"] < 2048 else "NOT MET")
    )


if __name__ == "__main__":
    main()

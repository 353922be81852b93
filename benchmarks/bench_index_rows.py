"""Reading the rows of a search's hits from an index directory: each row alone, against a pass over
the whole keys and texts files.

    python benchmarks/bench_index_rows.py [--sizes 100000,1000000] [--dim 384] [--workdir out/bench_index_rows]

For each corpus size, an index of random unit vectors and synthetic 30-character Chinese lines
is written by ``index --from-vectors`` (the built-in model's record; no model runs), opened once
(`IndexDirectory`: every file hashed, where each line of the keys and texts starts noted), and
then, for the 10 hits of each of 20 queries:

- ``rows``: `IndexDirectory.rows`, each row read alone from the 64 KiB blocks that hold it, each
  block checked against its digest taken at opening (`CheckedFile.line`);
- ``whole pass``: both files read through `CheckedFile.reading` from start to end, a line at a
  time, their sha256 checked at the end: what a search read before, for any number of hits.

Prints the median of each per search and their ratio, the opening's time and the line index's
memory. Wall-clock on a shared machine: read the ratio, taken within this one run.
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SEARCHES, HITS = 20, 10
CHARACTERS = "今天的天气非常好我们一起去公园散步吧明天会下雨吗这个问题很难回答"


def write_index(directory, n, dim, rng):
    """An index directory of ``n`` random unit vectors of ``dim`` and a line of text for each."""
    os.makedirs(directory, exist_ok=True)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(os.path.join(directory, "vectors.npy"), vectors)
    lines = rng.choice(list(CHARACTERS), size=(n, 30))
    with open(os.path.join(directory, "lines.txt"), "w", encoding="utf-8") as stream:
        stream.writelines("".join(line) + "\n" for line in lines)
    index = os.path.join(directory, "index")
    shutil.rmtree(index, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "bert_whitening", "index", "--from-vectors", "vectors.npy", "lines.txt"]
        + ["--output", "index"],
        cwd=directory,
        check=True,
        capture_output=True,
    )
    return index


def whole_pass(opened):
    """Both row files read from start to end through the checked descriptors, a line at a time."""
    from bert_whitening.retrieval.index_directory import KEYS_FILE, TEXTS_FILE

    for name in (KEYS_FILE, TEXTS_FILE):
        with opened._files[name].reading() as stream:
            for _ in stream:
                pass


def cpu_model():
    """The CPU's model name, as lscpu shows it."""
    with open("/proc/cpuinfo", encoding="utf-8") as stream:
        return next((line.split(":", 1)[1].strip() for line in stream if line.startswith("model name")), "?")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--workdir", default=os.path.join(ROOT, "out", "bench_index_rows"))
    args = parser.parse_args()

    from bert_whitening.retrieval.index_directory import KEYS_FILE, TEXTS_FILE, IndexDirectory

    print(
        "machine: %s, %s, %d cores; numpy %s; %s"
        % (
            platform.machine(),
            cpu_model(),
            os.cpu_count(),
            np.__version__,
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )
    )
    print("%d searches of %d hits each; medians per search" % (SEARCHES, HITS))
    print(
        "%9s %12s %10s %12s %14s %8s %16s"
        % ("corpus", "rows bytes", "open s", "rows ms", "whole pass ms", "ratio", "line index MiB")
    )
    rng = np.random.default_rng(0)
    for n in (int(size) for size in args.sizes.split(",")):
        index = write_index(os.path.join(args.workdir, str(n)), n, args.dim, rng)
        began = time.perf_counter()
        opened = IndexDirectory(index)
        opening = time.perf_counter() - began
        hits = [set(rng.choice(n, HITS, replace=False).tolist()) for _ in range(SEARCHES)]
        rows, passes = [], []
        for wanted in hits:
            began = time.perf_counter()
            opened.rows(wanted)
            rows.append(time.perf_counter() - began)
            began = time.perf_counter()
            whole_pass(opened)
            passes.append(time.perf_counter() - began)
        files = [opened._files[name] for name in (KEYS_FILE, TEXTS_FILE)]
        print(
            "%9d %12d %10.2f %12.3f %14.1f %7.0fx %16.1f"
            % (
                n,
                sum(file.size for file in files),
                opening,
                1e3 * statistics.median(rows),
                1e3 * statistics.median(passes),
                statistics.median(passes) / statistics.median(rows),
                sum(file._starts.nbytes + 32 * len(file._block_digests) for file in files) / 2**20,
            )
        )


if __name__ == "__main__":
    main()

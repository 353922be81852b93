"""How fast a refused command answers: a bad option, a missing input, a whitening of another
model. All are decided before TensorFlow is imported, so each should take well under 1.5 s.

    python benchmarks/bench_refusals.py [--repeats 5]

Prints, per case, the median wall time of ``python -m bert_whitening ...`` over the repeats, its
exit status and its one error line, beside ``python -c pass`` (the interpreter alone).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def timed(argv, repeats):
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
        times.append(time.perf_counter() - started)
    error = [line for line in result.stderr.splitlines() if line.startswith(("ERROR", "usage", "bert-whitening:"))]
    return statistics.median(times), result.returncode, (error or [""])[-1][:90]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    with tempfile.TemporaryDirectory() as scratch:
        other = os.path.join(scratch, "w768.npz")  # fitted on 768-dimensional vectors
        fit_whitening(WhiteningStats().update(np.random.default_rng(0).normal(size=(800, 768)))).save(other)
        lines = os.path.join(scratch, "in.txt")
        with open(lines, "w", encoding="utf-8") as stream:
            stream.write("a\n")
        cases = [
            ("interpreter alone", ["-c", "pass"]),
            ("--help", ["-m", "bert_whitening", "encode", "--help"]),
            (
                "bad option (--batch-size 0)",
                [
                    "-m",
                    "bert_whitening",
                    "encode",
                    "--batch-size",
                    "0",
                    "--output",
                    os.path.join(scratch, "v.npy"),
                    lines,
                ],
            ),
            (
                "missing input file",
                [
                    "-m",
                    "bert_whitening",
                    "fit",
                    "--output",
                    os.path.join(scratch, "w.npz"),
                    os.path.join(scratch, "missing.txt"),
                ],
            ),
            (
                "whitening of another model",
                [
                    "-m",
                    "bert_whitening",
                    "encode",
                    "--whitening",
                    other,
                    "--output",
                    os.path.join(scratch, "v.npy"),
                    lines,
                ],
            ),
            (
                "existing export version",
                ["-m", "bert_whitening", "export", "--output", scratch, "--version", "1"],
            ),
        ]
        os.mkdir(os.path.join(scratch, "1"))
        print("%-30s %9s %6s  %s" % ("case", "median s", "status", "message"))
        for name, argv in cases:
            seconds, status, message = timed(argv, args.repeats)
            print("%-30s %9.2f %6d  %s" % (name, seconds, status, message))


if __name__ == "__main__":
    main()

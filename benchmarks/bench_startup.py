"""Start-up of the command line against TensorFlow's own: ``bert-whitening encode`` of one line
(the built-in model, the default options) against ``python -c "import tensorflow"``, and
``bert-whitening --help``, each in fresh processes, the three interleaved round by round.

    python benchmarks/bench_startup.py [--rounds 5]

Prints the best and the median of each over the rounds and the ratios of the bests (targets:
encode within 1.5x of the import, --help under 1.5 s), with the CPU. Run it on an idle machine.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def timed(argv, **kwargs):
    started = time.perf_counter()
    result = subprocess.run([sys.executable, *argv], capture_output=True, text=True, **kwargs)
    seconds = time.perf_counter() - started
    if result.returncode:
        sys.exit("%s failed:\n%s" % (" ".join(argv), result.stderr[-2000:]))
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from bench_encode import cpu_name

    with tempfile.TemporaryDirectory() as work:
        line = os.path.join(work, "one.txt")
        with open(line, "w", encoding="utf-8") as stream:
            stream.write("The weather is lovely today\n")
        cases = {
            "import tensorflow": ["-c", "import tensorflow"],
            "encode of one line": ["-m", "bert_whitening", "encode", "--output", os.path.join(work, "v.npy"), line],
            "--help": ["-m", "bert_whitening", "--help"],
        }
        times = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():
                if name == "encode of one line" and os.path.exists(os.path.join(work, "v.npy")):
                    os.remove(os.path.join(work, "v.npy"))
                times[name].append(timed(argv, cwd=work))
    print("CPU: %s, %d cores; %d rounds, interleaved" % (cpu_name(), os.cpu_count(), args.rounds))
    for name, values in times.items():
        print("  %-20s best %.2f s, median %.2f s" % (name, min(values), statistics.median(values)))
    ratio = min(times["encode of one line"]) / min(times["import tensorflow"])
    print("encode / import tensorflow (bests): %.2fx (target <= 1.5x)" % ratio)
    print("--help (best): %.2f s (target < 1.5 s)" % min(times["--help"]))


if __name__ == "__main__":
    main()

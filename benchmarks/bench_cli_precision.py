"""`encode` through the command line in float32 and in bfloat16: the marginal rate users get.

    python benchmarks/bench_cli_precision.py [--small 4000] [--large 12000] [--rounds 2]

Each precision runs ``bert-whitening encode --model minilm --pooling last-avg --precision P`` as a
user would (a new process, the model loaded, vectors written) on the first --small and the first
--large distinct English STS-benchmark sentences; the marginal rate, (large - small) sentences
over the difference of the two wall times, leaves out the start-up both pay. Rounds are
interleaved, and each precision's best round is printed with the bfloat16/float32 ratio, to hold
beside bench_encode.py's in-process ratio. Run it on an idle machine with AVX512_BF16 or AMX.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
PRECISIONS = ("float32", "bfloat16")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=4000)
    parser.add_argument("--large", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from bench_encode import cpu_name
    from bench_serving import sts_sentences

    sentences = sts_sentences(args.large)
    if len(sentences) < args.large:
        sys.exit("only %d distinct sentences: choose a smaller --large" % len(sentences))
    workdir = tempfile.mkdtemp()
    files = {}
    for size in (args.small, args.large):
        files[size] = os.path.join(workdir, "%d.txt" % size)
        with open(files[size], "w", encoding="utf-8") as stream:
            stream.write("".join(sentence + "\n" for sentence in sentences[:size]))
    program = os.path.join(os.path.dirname(sys.executable), "bert-whitening")

    def seconds(precision, size):
        command = [program, "--log-level", "WARNING", "encode", "--model", "minilm", "--pooling", "last-avg"]
        command += ["--precision", precision, "--output", os.path.join(workdir, "v.npy"), files[size]]
        start = time.perf_counter()
        subprocess.run(command, check=True)
        return time.perf_counter() - start

    rates = {precision: [] for precision in PRECISIONS}
    for _ in range(args.rounds):
        for precision in PRECISIONS:
            small, large = seconds(precision, args.small), seconds(precision, args.large)
            rates[precision].append((args.large - args.small) / (large - small))
            print(
                "%-9s %5d sentences %6.1f s, %5d sentences %6.1f s" % (precision, args.small, small, args.large, large)
            )
    best = {precision: max(found) for precision, found in rates.items()}
    print(
        "%s, %d cores; encode --model minilm --pooling last-avg; best of %d rounds"
        % (cpu_name(), os.cpu_count(), args.rounds)
    )
    for precision in PRECISIONS:
        print("%-9s marginal %6.0f sentences/s" % (precision, best[precision]))
    print("bfloat16 / float32 through the command line: %.2fx" % (best["bfloat16"] / best["float32"]))


if __name__ == "__main__":
    main()

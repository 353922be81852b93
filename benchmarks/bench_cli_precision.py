"""`encode` through the command line in float32 and in bfloat16: the marginal rate users get.

    python benchmarks/bench_cli_precision.py [--small 4000] [--large 12000] [--rounds 2]
        [--model minilm] [--precisions float32 bfloat16 auto] [--without-frozen-weights]

Each precision runs ``bert-whitening encode --model MODEL --pooling last-avg --precision P`` as a
user would (a new process, the model loaded, vectors written) on the first --small and the first
--large distinct English STS-benchmark sentences; the marginal rate, (large - small) sentences
over the difference of the two wall times, leaves out the start-up both pay, and each run's peak
resident memory is printed (as the kernel counts a child's: never below this process's own peak,
printed with it). Rounds are interleaved, and each precision's best round is printed
with its ratio to float32, to hold beside bench_encode.py's in-process ratio. On a CPU with AMX
the command line promises oneDNN frozen weights where bfloat16 may run
(`bert_whitening.commands.base.weights_frozen`); --without-frozen-weights runs the commands with
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=0, to measure what the promise gives and costs. --model takes any
model directory (bench_load_memory.py leaves one of BERT-base's sizes in
out/bench_load_memory/hf). Run it on an idle machine with AVX512_BF16 or AMX.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=4000)
    parser.add_argument("--large", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"], help="float32 comes first")
    parser.add_argument("--without-frozen-weights", action="store_true", help="the commands' promise turned off")
    args = parser.parse_args()

    from bench_encode import cpu_name
    from bench_fit import peak_rss_mib
    from bench_serving import sts_sentences

    from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE

    precisions = ["float32"] + [precision for precision in args.precisions if precision != "float32"]
    environment = dict(os.environ)
    if args.without_frozen_weights:
        environment[FROZEN_WEIGHTS_VARIABLE] = "0"

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

    def run(precision, size):
        """The command's wall time and peak resident memory (MB)."""
        command = [program, "--log-level", "WARNING", "encode", "--model", args.model, "--pooling", "last-avg"]
        command += ["--precision", precision, "--output", os.path.join(workdir, "v.npy"), files[size]]
        start = time.perf_counter()
        process = subprocess.Popen(command, env=environment)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            sys.exit("%s failed with status %d" % (" ".join(command), process.returncode))
        return time.perf_counter() - start, usage.ru_maxrss / 1024

    rates = {precision: [] for precision in precisions}
    peaks = {precision: 0.0 for precision in precisions}
    for _ in range(args.rounds):
        for precision in precisions:
            (small, small_peak), (large, large_peak) = run(precision, args.small), run(precision, args.large)
            rates[precision].append((args.large - args.small) / (large - small))
            peaks[precision] = max(peaks[precision], small_peak, large_peak)
            print(
                "%-9s %5d sentences %6.1f s (peak %5.0f MB), %5d sentences %6.1f s (peak %5.0f MB)"
                % (precision, args.small, small, small_peak, args.large, large, large_peak)
            )
    best = {precision: max(found) for precision, found in rates.items()}
    # A child's ru_maxrss starts from its parent's peak (Linux carries it across fork and exec,
    # bench_fit.peak_rss_mib): a command's peak at or below this process's own was not measured.
    print("this process's own peak: %.0f MB (the floor of each command's peak above)" % peak_rss_mib())
    print(
        "%s, %d cores; encode --model %s --pooling last-avg; best of %d rounds%s"
        % (
            cpu_name(),
            os.cpu_count(),
            args.model,
            args.rounds,
            "; %s=0" % FROZEN_WEIGHTS_VARIABLE if args.without_frozen_weights else "",
        )
    )
    for precision in precisions:
        print(
            "%-9s marginal %6.0f sentences/s, %.2fx float32, peak %5.0f MB"
            % (precision, best[precision], best[precision] / best["float32"], peaks[precision])
        )


if __name__ == "__main__":
    main()

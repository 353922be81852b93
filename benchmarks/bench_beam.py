"""beam-encode and beam-fit in worker processes against single-process `encode` and `fit`, one run.

    python benchmarks/bench_beam.py [--sentences 8000] [--repeats 1] [--batch-runs 3] [--workers 1 2]
                                    [--runners multi_processing portable] [--chinese]

The first --sentences distinct English STS-benchmark sentences (../shared/data; about 14,000), or
with --chinese those of every Chinese task there (131,614: for runs of 100,000), all-MiniLM-L6-v2
(built-in), first-last-avg, maxlen 64, batch 128, float32. Timed, repetitions interleaved (median
of --repeats rounds):
- ``encode`` (whitening fitted on the first 8,000 of the sentences, all dimensions, + L2) and ``fit`` (the
  unwhitened encoder's vectors into `WhiteningStats`, then the kernel) in this process, the
  model already loaded, as a long-running job has it;
- ``encode_on_runner`` and ``fit_on_runner`` (what ``bert-whitening beam-encode`` and ``beam-fit`` run) on
  DirectRunner with ``--direct_running_mode multi_processing --direct_num_workers N`` for each
  --workers N, and on the PortableRunner against Beam's Python job service with an EXTERNAL
  worker pool on loopback (`tests/beam_portable.py`; the services start before the clock,
  the worker the pool starts for each job is timed). Each worker starts, imports TensorFlow and
  loads the model, then encodes its share.
Every path runs on every other sentence and on all of them (the same mix of lengths), and on
one batch of them (128, evenly spaced). The rate without fixed cost is the marginal one, the
sentences added over the difference of the two larger runs' times (the issue's way of timing
the command line): it leaves out what a run pays once, the worker's start-up, model load and
first trace, which the one-process paths, warmed up, have already paid. The fixed cost is what
the one-batch run took beyond the same batch in the warmed process: read off a run that is
almost all start-up, it does not carry the larger runs' noise (a second of noise in either moves
the marginal rate, and an estimate from them, by several seconds). Each round runs the batch
--batch-runs times (3) and takes the median: a run that is mostly a process starting moves by
seconds on a shared machine. The batch is not subtracted at the marginal rate: its 128 sentences
of every length are padded to the longest, so it takes several times its share.
The vectors beam-encode wrote are checked against ``encode``'s, and beam-fit's mean against
``fit``'s (largest absolute differences).
"""

import argparse
import contextlib
import functools
import glob
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # beam_portable, the portable runner the tests start too
SENTEVAL = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")
CHINESE_TASKS = ["ATEC", "LCQMC", "STS-B"]  # the shared data's; BQ and PAWSX are held out
FIT_SENTENCES = 8000  # the whitening ``encode`` applies is fitted on these first sentences
WARM_UP_SENTENCES = 1024  # enough for the first traces (new input shapes cost nothing more)
BATCH = 128  # the batch size every path runs at; the fixed cost is read off a run of one batch


def main():
    from bert_whitening.commands.options import positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=8000, help="all; every other one is timed too")
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        help="rounds; each beam run costs its workers' start-up and model load",
    )
    parser.add_argument(
        "--batch-runs",
        type=positive_int,
        default=3,
        help="runs of the one batch per round, their median the fixed cost's",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="DirectRunner multi_processing workers")
    parser.add_argument("--runners", nargs="+", choices=["multi_processing", "portable"], default=["multi_processing"])
    parser.add_argument(
        "--chinese", action="store_true", help="the Chinese tasks' sentences (%s)" % ", ".join(CHINESE_TASKS)
    )
    args = parser.parse_args()
    # The SDK workers are fresh interpreters: they must import this checkout's package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )

    from beam_portable import local_portable_runner  # tests/: a test and benchmark helper
    from bench_encode import cpu_name

    from bert_whitening.backend import tf
    from bert_whitening.beam import encode_on_runner, fit_on_runner, read_encoded, shards
    from bert_whitening.config import EncoderConfig
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import encode
    from bert_whitening.models import build
    from bert_whitening.whitening import Whitening, WhiteningStats, fit_whitening

    tasks = CHINESE_TASKS if args.chinese else [ENGLISH_STS]
    splits = {(task, name): pairs for task in tasks for name, pairs in load_task(task, SENTEVAL).items()}
    sentences = distinct_sentences(splits)
    sentences = sentences[: args.sentences]
    corpus = "Chinese %s" % "/".join(tasks) if args.chinese else "English STS-benchmark"
    pooled_spec = EncoderConfig(model="minilm")
    pooled = build(pooled_spec)

    def fitted(vectors):
        return fit_whitening(WhiteningStats().update(vectors), pooling="first-last-avg")

    whitening = fitted(encode(pooled, sentences[:FIT_SENTENCES], progress=False))
    spec = EncoderConfig(model="minilm", whitening=whitening, normalize=True)
    encoder = build(spec)

    with tempfile.TemporaryDirectory() as workdir, contextlib.ExitStack() as services:
        inputs = {}
        # Every other sentence, and one batch evenly spaced: the same mix of lengths.
        parts = {"corpus": sentences, "half": sentences[::2], "batch": sentences[:: len(sentences) // BATCH][:BATCH]}
        for name, lines in parts.items():
            inputs[name] = os.path.join(workdir, name + ".txt")
            with open(inputs[name], "w", encoding="utf-8") as stream:
                stream.write("\n".join(lines) + "\n")
        runners = {}
        for runner in args.runners:
            if runner == "portable":
                services_dir = os.path.join(workdir, "services")
                os.mkdir(services_dir)
                runners["portable, 1 worker"] = services.enter_context(local_portable_runner(services_dir))[0]
            else:
                for workers in args.workers:
                    name = "multi_processing, %d worker%s" % (workers, "s" * (workers > 1))
                    runners[name] = ("--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers))

        def beam_encode(flags, name):
            output = os.path.join(workdir, "out", name)
            start = time.perf_counter()
            encode_on_runner([inputs[name]], spec, output, flags=flags)
            took = time.perf_counter() - start
            vectors = read_encoded(shards(output))[1] if name == "corpus" else None
            shutil.rmtree(os.path.dirname(output))
            return took, vectors

        def beam_fit(flags, name):
            output = os.path.join(workdir, name + ".npz")
            start = time.perf_counter()
            fit_on_runner([inputs[name]], pooled_spec, output, flags=flags)
            took = time.perf_counter() - start
            mean = Whitening.load(output).mean
            os.remove(output)
            return took, mean if name == "corpus" else None

        def single_encode(name):
            start = time.perf_counter()
            vectors = encode(encoder, parts[name], progress=False)
            return time.perf_counter() - start, vectors if name == "corpus" else None

        def single_fit(name):
            start = time.perf_counter()
            whitening = fitted(encode(pooled, parts[name], progress=False))
            return time.perf_counter() - start, whitening.mean if name == "corpus" else None

        functions = {"encode": single_encode, "fit": single_fit, "beam-encode": beam_encode, "beam-fit": beam_fit}
        paths = {}
        for runner, flags in [("one process", None)] + list(runners.items()):
            for command in ("encode", "fit"):
                command = command if flags is None else "beam-" + command
                for size in ("batch", "half", "corpus"):
                    arguments = (size,) if flags is None else (flags, size)
                    path = functools.partial(functions[command], *arguments)
                    if size == "batch":
                        path = functools.partial(_median_time, path, args.batch_runs)
                    paths["%s, %s, %s" % (command, runner, size)] = path
        # The tf.functions' first traces (`pooled` already ran for the whitening).
        encode(encoder, sentences[:WARM_UP_SENTENCES], progress=False)
        rounds = [{name: path() for name, path in paths.items()} for _ in range(args.repeats)]
        assert not glob.glob(os.path.join(workdir, "out", "*"))
    seconds = {name: statistics.median(r[name][0] for r in rounds) for name in paths}
    largest = {
        command: max(
            np.abs(r[name][1] - r["%s, one process, corpus" % command.split("-")[-1]][1]).max()
            for r in rounds
            for name in paths
            if name.startswith(command + ", ") and name.endswith(", corpus")
        )
        for command in ("beam-encode", "beam-fit")
    }

    print(
        "%d distinct %s sentences (and every other one: %d), all-MiniLM-L6-v2, first-last-avg "
        "(encode: whitening k=%d + L2), maxlen 64, batch 128, float32"
        % (len(sentences), corpus, len(sentences[::2]), encoder.n_components)
    )
    print(
        "machine: %s, %d cores, %s; tensorflow %s, apache-beam %s; median of %d (the one batch: of %d runs each)"
        % (
            platform.machine(),
            os.cpu_count(),
            cpu_name(),
            tf.__version__,
            _beam_version(),
            args.repeats,
            args.batch_runs,
        )
    )
    print()
    print(
        "%-40s %7s %8s %8s %12s %10s %17s %10s %11s"
        % ("path", "batch s", "half s", "all s", "sentences/s", "vs 1 proc", "marginal sent./s", "vs 1 proc", "fixed")
    )
    added = len(sentences) - len(sentences[::2])
    marginal = {}
    verdicts = []
    for name in paths:
        if not name.endswith(", corpus"):
            continue
        path = name[: -len(", corpus")]
        command, _, runner = path.partition(", ")
        batch, half, whole = seconds[path + ", batch"], seconds[path + ", half"], seconds[name]
        marginal[path] = added / (whole - half) if whole > half else float("nan")
        single = "%s, one process" % command.split("-")[-1]
        fixed = batch - seconds[single + ", batch"]
        fixed_cost = "-" if runner == "one process" else "%.1f s" % fixed
        rate, baseline = len(sentences) / whole, len(sentences) / seconds[single + ", corpus"]
        ratio = marginal[path] / marginal[single]
        print(
            "%-40s %7.2f %8.2f %8.2f %12.0f %9.2fx %17.0f %9.2fx %11s"
            % (path, batch, half, whole, rate, rate / baseline, marginal[path], ratio, fixed_cost)
        )
        if runner != "one process":
            verdicts.append(("%s marginal rate >= 0.9x one process" % path, "%.2fx" % ratio, ratio >= 0.9))
            # A start-up cannot take less than nothing: a negative estimate is noise.
            verdicts.append(("%s fixed cost <= 10 s" % path, "%.1f s" % fixed, fixed <= 10 if fixed >= 0 else None))
    for command, difference in largest.items():
        what = "vectors" if command == "beam-encode" else "mean"
        print("%s vs one process, largest absolute difference of the %s: %.2e" % (command, what, difference))
    print()
    for what, figure, met in verdicts:
        print("%-66s %8s  %s" % (what, figure, _verdict(met)))


def _median_time(path, runs):
    """``path()``'s median time over ``runs`` runs; nothing to compare (a batch's output is not)."""
    return statistics.median(path()[0] for _ in range(runs)), None


def _verdict(met):
    return "no estimate (noise)" if met is None else "met" if met else "NOT MET"


def _beam_version():
    import apache_beam

    return apache_beam.__version__


if __name__ == "__main__":
    main()

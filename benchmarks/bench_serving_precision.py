"""bfloat16 at serving time: TF Serving's ``--mixed_precision=bfloat16`` against ``export --precision bfloat16``.

    python benchmarks/bench_serving_precision.py [--sentences 4000] [--repeats 3] [--frozen-weights]

TF Serving's ``--mixed_precision=bfloat16`` turns on Grappler's
``auto_mixed_precision_onednn_bfloat16`` rewrite for the graphs it loads; here the same option is
set in process before each SavedModel is loaded (a fresh load per setting, since the rewrite runs
when a function is first instantiated). One encoder (all-MiniLM-L6-v2, first-last-avg, whitening
of every dimension fitted on the sentences) is exported twice, in float32 and with
``--precision bfloat16``, and each export runs ``serving_default`` (batches of 128 token-id rows
sorted by length, as ``encode`` cuts them) and ``serve_text`` (128 sentences a call, in file
order) with the rewrite off and on. Printed: sentences/s (median of --repeats after a warm-up),
its ratio to the float32 export without the rewrite, the median latency of a call on one
sentence, and the smallest cosine of every vector to that export's. Run it on an idle machine,
and on a CPU with AVX512_BF16 or AMX (elsewhere oneDNN emulates bfloat16). ``--frozen-weights``
lets oneDNN keep each product's weights in its blocked layout from the first call on, which a
server may (its weights never change) and which AMX needs.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
REWRITE = "auto_mixed_precision_onednn_bfloat16"
#: Single-sentence calls whose median latency is printed (the first, a warm-up, left out).
SINGLE_SENTENCES = 101


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    from bench_encode import cpu_name, parse_with_frozen_weights
    from bench_serving import sts_sentences, whitened_minilm

    args = parse_with_frozen_weights(parser)

    from bert_whitening.backend import tf
    from bert_whitening.encoding import batches, tokenize
    from bert_whitening.export import ExportOptions, check_export, export_saved_model
    from bert_whitening.tokenization.token_ids import pad_ids

    sentences = sts_sentences(args.sentences)
    encoder = whitened_minilm(sentences)
    sequences, _ = tokenize(encoder, sentences)
    padded = list(batches(sequences, 128))
    padded_one = [pad_ids([ids]) for ids in sequences[:SINGLE_SENTENCES]]
    workdir = tempfile.mkdtemp()
    exports = {
        precision: export_saved_model(
            encoder, os.path.join(workdir, precision), ExportOptions(text=True, precision=precision)
        )[0]
        for precision in ("float32", "bfloat16")
    }

    def run(path, rewrite, signature):
        """``(vectors, seconds of each repeat)`` of one signature of a fresh load."""
        tf.config.optimizer.set_experimental_options({REWRITE: rewrite})
        check_export(path)  # the files the export's record binds, before TensorFlow reads them
        function = tf.saved_model.load(path).signatures[signature]
        vectors = np.zeros((len(sentences), encoder.dim), np.float32)

        def once():
            if signature == "serving_default":
                for rows, ids in padded:
                    ids = tf.constant(ids)
                    vectors[rows] = function(input_ids=ids, segment_ids=tf.zeros_like(ids))["embedding"].numpy()
            else:
                for start in range(0, len(sentences), 128):
                    texts = tf.constant(sentences[start : start + 128])
                    vectors[start : start + 128] = function(text=texts)["embedding"].numpy()

        def one_sentence(index):
            if signature == "serving_default":
                ids = tf.constant(padded_one[index])
                function(input_ids=ids, segment_ids=tf.zeros_like(ids))["embedding"].numpy()
            else:
                function(text=tf.constant(sentences[index : index + 1]))["embedding"].numpy()

        once()
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            once()
            times.append(time.perf_counter() - start)
        latencies = []
        for index in range(len(padded_one)):
            start = time.perf_counter()
            one_sentence(index)
            latencies.append(time.perf_counter() - start)
        return vectors.copy(), times, statistics.median(latencies[1:])

    settings = [
        ("float32 export", "float32", False),
        ("float32 export + --mixed_precision=bfloat16", "float32", True),
        ("export --precision bfloat16", "bfloat16", False),
        ("export --precision bfloat16 + --mixed_precision=bfloat16", "bfloat16", True),
    ]
    print(
        "%d distinct English STS-benchmark sentences, all-MiniLM-L6-v2, first-last-avg + whitening (k=%d) + L2; "
        "%s, %d cores, tensorflow %s; median of %d; TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=%s"
        % (
            len(sentences),
            encoder.n_components,
            cpu_name(),
            os.cpu_count(),
            tf.__version__,
            args.repeats,
            os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "unset"),
        )
    )
    print(
        "%-58s %-16s %11s %9s %12s %9s"
        % ("export, server setting", "signature", "sentences/s", "vs fp32", "p50 1 sent", "min cos")
    )
    for signature in ("serving_default", "serve_text"):
        reference, reference_times, reference_latency = run(exports["float32"], False, signature)
        base = statistics.median(reference_times)
        for name, precision, rewrite in settings:
            vectors, times, latency = (
                (reference, reference_times, reference_latency)
                if (precision, rewrite) == ("float32", False)
                else run(exports[precision], rewrite, signature)
            )
            seconds = statistics.median(times)
            cosine = float((vectors * reference).sum(axis=1).min())
            print(
                "%-58s %-16s %11.0f %8.2fx %9.2f ms %9.6f"
                % (name, signature, len(sentences) / seconds, base / seconds, latency * 1e3, cosine)
            )
    tf.config.optimizer.set_experimental_options({REWRITE: False})


if __name__ == "__main__":
    main()

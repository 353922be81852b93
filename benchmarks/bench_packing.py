"""Where packing a served batch pays: the export's graph on every row against packed, by share of padding.

    python benchmarks/bench_packing.py [--sentences 512] [--repeats 5] [--batch-sizes 2 4 8 16 32 64]
        [--precisions float32 bfloat16] [--frozen-weights]

A server's batch joins requests of any length; the export's graph runs a batch packed (its
products on the real tokens' rows alone) when more than `fused_bert.PACK_ABOVE_PADDING` of it
is padding. This exports all-MiniLM-L6-v2 (first-last-avg, whitening of every dimension fitted on
the sentences) twice per precision, with the threshold set so that one export always packs and
the other never does, loads them as a server would, and times ``serving_default`` on batches of
the first --sentences distinct English STS-B sentences in file order (as requests arrive), the
two exports alternating on each batch (median of --repeats calls each). Printed per batch size:
the median speed-up of packing for each band of padding share. ``--frozen-weights`` sets
``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`` before TensorFlow starts, as docs/serving.md has a server
on a CPU with AMX do. Run it on an idle machine.
"""

import argparse
import os
import statistics
import sys
import tempfile
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
#: Bands of padding share the speed-ups are grouped in.
BAND = 0.05


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    from bench_encode import cpu_name, parse_with_frozen_weights, seconds
    from bench_serving import sts_sentences, whitened_minilm

    args = parse_with_frozen_weights(parser)

    from bert_whitening.backend import tf
    from bert_whitening.encoding import tokenize
    from bert_whitening.export import ExportOptions, export_saved_model
    from bert_whitening.layers import fused_bert
    from bert_whitening.tokenization.token_ids import pad_ids

    sentences = sts_sentences(args.sentences)
    encoder = whitened_minilm(sentences)
    sequences, _ = tokenize(encoder, sentences)
    workdir = tempfile.mkdtemp()
    print(
        "%d distinct English STS-benchmark sentences in file order, all-MiniLM-L6-v2, serving_default; %s, %d cores, "
        "tensorflow %s; median of %d calls; TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=%s"
        % (
            len(sentences),
            cpu_name(),
            os.cpu_count(),
            tf.__version__,
            args.repeats,
            os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "unset"),
        )
    )
    for precision in args.precisions:
        served = {}
        for name, threshold in (("packed", -1.0), ("every row", 2.0)):
            with mock.patch.object(fused_bert, "PACK_ABOVE_PADDING", threshold):
                path, _ = export_saved_model(
                    encoder,
                    os.path.join(workdir, precision + name.replace(" ", "_")),
                    ExportOptions(precision=precision),
                )
            served[name] = tf.saved_model.load(path).signatures["serving_default"]
        print(
            "\n%s export: speed-up of packing (time on every row / time packed), median by share of padding" % precision
        )
        print("%-6s %-10s %9s %8s" % ("batch", "padding", "speed-up", "batches"))
        for size in args.batch_sizes:
            by_band = {}
            for start in range(0, len(sequences) - size + 1, size):
                rows = sequences[start : start + size]
                ids = tf.constant(pad_ids(rows))
                padding = 1 - sum(map(len, rows)) / (ids.shape[0] * ids.shape[1])
                calls = {
                    name: (
                        lambda call=call, ids=ids: call(input_ids=ids, segment_ids=tf.zeros_like(ids))[
                            "embedding"
                        ].numpy()
                    )
                    for name, call in served.items()
                }
                times = {name: [] for name in calls}
                for call in calls.values():
                    call()
                for _ in range(args.repeats):
                    for name, call in calls.items():
                        times[name].append(seconds(call))
                speedup = statistics.median(times["every row"]) / statistics.median(times["packed"])
                by_band.setdefault(int(padding // BAND), []).append(speedup)
            for band, found in sorted(by_band.items()):
                share = "%d-%d%%" % (round(100 * band * BAND), round(100 * (band + 1) * BAND))
                print("%-6d %-10s %8.2fx %8d" % (size, share, statistics.median(found), len(found)))
    print("\n(the export's threshold: packed above %.0f%% padding)" % (100 * fused_bert.PACK_ABOVE_PADDING))


if __name__ == "__main__":
    main()

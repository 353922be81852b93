"""The BERT graph `encode` runs (`bert_whitening.layers.FusedBert`) against bert4keras' own, through `encode`.

    python benchmarks/bench_fused_graph.py [--sentences 4000] [--repeats 5] [--frozen-weights]

all-MiniLM-L6-v2, first-last-avg, the first --sentences distinct English STS-benchmark
sentences, batch 128. Both encoders come from the same checkpoint load path
(`bert_whitening.models.build_encoder`); the bert4keras one is built with the fused layer
turned down, as for a model the layer does not mirror. Timed interleaved (median of --repeats),
in float32 and under the bfloat16 automatic mixed precision, with `encode`'s two batches under
way at once and with one at a time; prints the largest difference between the two graphs'
vectors. ``--frozen-weights`` sets
``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`` before TensorFlow starts, which lets oneDNN keep weights
in its blocked layout (only then does a fused bfloat16 product use AMX).
"""

import argparse
import os
from unittest import mock

import numpy as np
from bench_encode import SENTEVAL, interleaved, parse_with_frozen_weights, seconds  # also puts the checkout on sys.path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parse_with_frozen_weights(parser)

    from bert_whitening import encoding, models
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import encode
    from bert_whitening.layers import FusedBert
    from bert_whitening.precision import precision_scope

    sentences = distinct_sentences(load_task(ENGLISH_STS, SENTEVAL))[: args.sentences]
    encoders = {"fused": models.build_encoder("minilm")}
    with mock.patch.object(models, "_runs_fused", return_value=False):
        encoders["bert4keras"] = models.build_encoder("minilm")
    assert any(isinstance(layer, FusedBert) for layer in encoders["fused"].model.layers)
    vectors = {name: encode(encoder, sentences) for name, encoder in encoders.items()}

    def timed(encoder, width):
        def run():
            with mock.patch.object(encoding, "BATCHES_IN_FLIGHT", width):
                return seconds(lambda: encode(encoder, sentences))

        return run

    print(
        "%d sentences, all-MiniLM-L6-v2 first-last-avg, batch 128; TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=%s"
        % (len(sentences), os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "unset"))
    )
    print(
        "largest difference between the graphs' vectors (float32): %.2e"
        % np.abs(vectors["fused"] - vectors["bert4keras"]).max()
    )
    print("%-10s %-16s %14s %12s %10s" % ("precision", "batches at once", "bert4keras s", "fused s", "speed-up"))
    for precision in ("float32", "bfloat16"):
        for width in (encoding.BATCHES_IN_FLIGHT, 1):
            with precision_scope(precision):
                took = interleaved({name: timed(encoder, width) for name, encoder in encoders.items()}, args.repeats)
            print(
                "%-10s %-16d %14.2f %12.2f %9.2fx"
                % (precision, width, took["bert4keras"], took["fused"], took["bert4keras"] / took["fused"])
            )
    print("median of %d interleaved runs; run with ONEDNN_VERBOSE=1 to see the kernels oneDNN picks" % args.repeats)


if __name__ == "__main__":
    main()

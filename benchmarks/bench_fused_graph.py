"""An experiment kept for its figures: would a hand-fused BERT graph beat bert4keras' graph?

    python benchmarks/bench_fused_graph.py [--sentences 4000] [--repeats 7] [--frozen-weights]

bert4keras applies each Dense to ``(batch, length, hidden)`` tensors, which Keras turns into
reshape, MatMul, reshape, BiasAdd: the reshape keeps Grappler from fusing the bias and the GELU
into the product. The experiment computes the same BERT forward pass (all-MiniLM-L6-v2, the
bert4keras weights, first-last-avg pooling) on ``(tokens, hidden)`` rows instead, with the
query, key and value projections as one product, so that each Dense becomes one oneDNN inner
product with its bias and GELU as post-ops. It prints the largest difference from the Keras
model's vectors and both graphs' time on the same length-sorted padded batches, interleaved, in
float32 and under the bfloat16 automatic mixed precision, and oneDNN's choice of kernel.
``--frozen-weights`` sets ``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`` before TensorFlow starts, which
lets oneDNN keep weights in its blocked layout (only then does the fused bfloat16 product use
AMX). The README's Performance section quotes the outcome and why it was not adopted.
"""

import argparse
import os

import numpy as np
from bench_encode import SENTEVAL, interleaved, seconds  # also puts the checkout on sys.path


def fused_forward(tf, model, heads, blocks, epsilon=1e-12):
    """A ``tf.function`` (ids, segments) -> first-last-avg vectors, from the weights of the
    encoder's Keras ``model`` (bert4keras' layers, by name), on rows of tokens; masked keys get
    -1e12 as in bert4keras; the package's own `MaskedAveragePooling` pools the two taps."""
    from bert_whitening.layers import MaskedAveragePooling

    pooling = MaskedAveragePooling()
    weights = {w.name.split(":")[0]: w for w in model.weights}
    hidden = weights["Embedding-Token/embeddings"].shape[1]
    size = hidden // heads

    def layer_norm(x, name):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + epsilon) * weights[name + "/gamma"] + weights[name + "/beta"]

    def dense(x, name, gelu=False):
        y = tf.nn.bias_add(tf.matmul(x, weights[name + "/kernel"]), weights[name + "/bias"])
        return 0.5 * y * (1.0 + tf.math.erf(y / np.sqrt(2.0))) if gelu else y

    projections = ("dense", "dense_1", "dense_2")  # query, key, value in bert4keras' order
    qkv = [
        (
            tf.concat([weights["Transformer-%d-MultiHeadSelfAttention/%s/kernel" % (i, p)] for p in projections], 1),
            tf.concat([weights["Transformer-%d-MultiHeadSelfAttention/%s/bias" % (i, p)] for p in projections], 0),
        )
        for i in range(blocks)
    ]

    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec])
    def forward(ids, segments):
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        mask = tf.cast(ids != 0, tf.float32)
        x = (
            tf.gather(weights["Embedding-Token/embeddings"], ids)
            + tf.gather(weights["Embedding-Segment/embeddings"], segments)
            + weights["Embedding-Position/embeddings"][:length][None]
        )
        x = layer_norm(tf.reshape(x, [batch * length, hidden]), "Embedding-Norm")
        key_bias = (1.0 - mask)[:, None, None, :] * -1e12
        taps = []
        for i in range(blocks):
            attention, feed_forward = "Transformer-%d-MultiHeadSelfAttention" % i, "Transformer-%d-FeedForward" % i
            y = tf.nn.bias_add(tf.matmul(x, qkv[i][0]), qkv[i][1])
            q, k, v = tf.unstack(tf.transpose(tf.reshape(y, [batch, length, 3, heads, size]), [2, 0, 3, 1, 4]))
            scores = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / size**0.5 + key_bias)
            context = tf.reshape(tf.transpose(tf.matmul(scores, v), [0, 2, 1, 3]), [batch * length, hidden])
            x = layer_norm(x + dense(context, attention + "/dense_3"), attention + "-Norm")
            x = layer_norm(
                x + dense(dense(x, feed_forward + "/dense", gelu=True), feed_forward + "/dense_1"),
                feed_forward + "-Norm",
            )
            if i in (0, blocks - 1):
                taps.append(x)
        return pooling([tf.reshape(tap, [batch, length, hidden]) for tap in taps], padding_mask=ids)

    return forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--frozen-weights", action="store_true", help="set TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 before TensorFlow starts"
    )
    args = parser.parse_args()
    if args.frozen_weights:
        os.environ["TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"] = "1"

    from bert_whitening.backend import tf
    from bert_whitening.checkpoints import find_model
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import batches, compiled, precision_scope, tokenize
    from bert_whitening.models import build_encoder

    sentences = distinct_sentences(load_task(ENGLISH_STS, SENTEVAL))[: args.sentences]
    encoder = build_encoder("minilm", pooling="first-last-avg", maxlen=64)
    config = find_model("minilm").config
    fused = fused_forward(tf, encoder.model, config["num_attention_heads"], config["num_hidden_layers"])
    keras_graph = compiled(encoder.model)
    padded = [tf.constant(ids) for _, ids in batches(tokenize(encoder, sentences)[0], args.batch_size)]

    def run(graph):
        return lambda: seconds(lambda: [graph(ids, tf.zeros_like(ids)).numpy() for ids in padded])

    difference = max(
        float(np.abs(fused(ids, tf.zeros_like(ids)) - keras_graph(ids, tf.zeros_like(ids))).max()) for ids in padded
    )
    print(
        "%d sentences, %d padded batches of %d, all-MiniLM-L6-v2 first-last-avg; TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=%s"
        % (len(sentences), len(padded), args.batch_size, os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "unset"))
    )
    print("largest difference from the Keras graph's vectors (float32): %.2e" % difference)
    print("%-10s %14s %14s %10s" % ("precision", "Keras graph s", "fused graph s", "speed-up"))
    for precision in ("float32", "bfloat16"):
        with precision_scope(precision):
            took = interleaved({"keras": run(keras_graph), "fused": run(fused)}, args.repeats)
        print("%-10s %14.2f %14.2f %9.2fx" % (precision, took["keras"], took["fused"], took["keras"] / took["fused"]))
    print("median of %d interleaved runs; run with ONEDNN_VERBOSE=1 to see the kernels oneDNN picks" % args.repeats)


if __name__ == "__main__":
    main()

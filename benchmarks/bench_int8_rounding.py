"""How far int8 dense products move our vectors: why no int8 path stands in for float32.

    python benchmarks/bench_int8_rounding.py [--sentences 4000]

On a CPU without bfloat16 instructions the default runs float32, whose dense products already
run near the CPU's float32 GEMM peak (`bench_encode.py` prints both); the one faster format such
a CPU has is int8 (VNNI). This rounds the operands of `FusedBert`'s dense products as an int8
path would (products and sums stay exact in float32, as int8 products accumulate exactly in
int32) and prints each rounding's smallest cosine to float32, on the whitened vectors (k = all)
that the accuracy bound of docs/performance.md is set on and on the unwhitened ones. The same
rounding to bfloat16 is the control: its figures should sit near the real bfloat16 path's,
printed first. all-MiniLM-L6-v2, first-last-avg, the first --sentences distinct English STS
benchmark sentences, maxlen 64, whitening fitted on them. Last, what int8 would buy: one
product's float32 time against TensorFlow's int8 product on this CPU.
"""

import argparse
from unittest import mock

import numpy as np
from bench_encode import SENTEVAL, cosines  # also puts the checkout on sys.path


def int8_columns(kernel, tf):
    """Each output column of ``kernel`` on 255 symmetric levels of its own scale."""
    scale = tf.reduce_max(tf.abs(kernel), axis=0) / 127.0
    return tf.round(kernel / scale) * scale


def int8_rows(x, tf):
    """Each row (token) of ``x`` on 255 symmetric levels of its own scale, as dynamic int8
    quantisation per token would round the activations."""
    scale = tf.reduce_max(tf.abs(x), axis=1, keepdims=True) / 127.0
    return tf.round(tf.math.divide_no_nan(x, scale)) * scale  # an all-zero row stays zero


def uint8_batch(x, tf):
    """The whole batch on 256 levels between its smallest and largest value (zero exact), as
    ONNX Runtime's dynamic quantisation rounds activations."""
    low, high = tf.minimum(tf.reduce_min(x), 0.0), tf.maximum(tf.reduce_max(x), 0.0)
    scale = (high - low) / 255.0
    zero = tf.round(-low / scale)
    return (tf.clip_by_value(tf.round(x / scale) + zero, 0.0, 255.0) - zero) * scale


def int8_speedup(tf, rows=2048, inner=384, columns=1536, repeats=20):
    """float32 product time / int8 product time (TensorFlow's oneDNN int8 product with bias and
    dequantisation to float32) at one shape of MiniLM's feed-forward layer, operands made up."""
    import time

    a, b = tf.random.normal([rows, inner]), tf.random.normal([inner, columns])
    a8 = tf.bitcast(tf.cast(tf.random.uniform([rows, inner], 0, 255, tf.int32), tf.uint8), tf.quint8)
    b8 = tf.bitcast(tf.cast(tf.random.uniform([inner, columns], -127, 127, tf.int32), tf.int8), tf.qint8)
    bias = tf.zeros([columns])
    products = {
        "float32": tf.function(lambda: tf.matmul(a, b)),
        "int8": tf.function(
            lambda: tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
                a=a8,
                b=b8,
                bias=bias,
                min_a=0.0,
                max_a=1.0,
                min_b=-1.0,
                max_b=1.0,
                min_freezed_output=-1.0,
                max_freezed_output=1.0,
                Toutput=tf.float32,
            )
        ),
    }
    took = {}
    for name, product in products.items():
        product().numpy()
        start = time.perf_counter()
        for _ in range(repeats):  # on the CPU a call returns when its product is done
            product()
        took[name] = time.perf_counter() - start
    return took["float32"] / took["int8"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    args = parser.parse_args()

    from bert_whitening.backend import tf
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.encoding import encode
    from bert_whitening.layers import fused_bert
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.precision import precision_scope
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    def bfloat16(x, tf):
        return tf.cast(tf.cast(x, tf.bfloat16), tf.float32)

    def unchanged(x, tf):
        return x

    roundings = {  # name: (rounding of the kernels, rounding of the inputs)
        "bfloat16 kernels and inputs (the control)": (bfloat16, bfloat16),
        "int8 kernels per column, float32 inputs": (int8_columns, unchanged),
        "int8 kernels per column, int8 inputs per token": (int8_columns, int8_rows),
        "int8 kernels per column, uint8 inputs per batch": (int8_columns, uint8_batch),
    }
    sentences = distinct_sentences(load_task(ENGLISH_STS, SENTEVAL))[: args.sentences]

    def vectors():
        pooled = build_encoder("minilm", pooling="first-last-avg", maxlen=64)
        return encode(pooled, sentences, progress=False), encode(with_whitening(pooled, whitening), sentences)

    pooled = build_encoder("minilm", pooling="first-last-avg", maxlen=64)
    whitening = fit_whitening(WhiteningStats().update(encode(pooled, sentences)), pooling="first-last-avg")
    reference = vectors()
    with precision_scope("bfloat16"):
        results = {"the bfloat16 path (--precision bfloat16)": vectors()}
    for name, (round_kernel, round_input) in roundings.items():

        def dense(x, kernel_bias, dtype, round_kernel=round_kernel, round_input=round_input):
            kernel, bias = kernel_bias
            return tf.nn.bias_add(tf.matmul(round_input(tf.cast(x, tf.float32), tf), round_kernel(kernel, tf)), bias)

        with mock.patch.object(fused_bert, "_dense", dense):
            results[name] = vectors()
    print(
        "%d distinct English STS-benchmark sentences, all-MiniLM-L6-v2 first-last-avg, maxlen 64; "
        "cosines to float32" % len(sentences)
    )
    print(
        "%-52s %14s %14s %14s"
        % ("rounding of the dense products' operands", "min whitened", "median", "min unwhitened")
    )
    for name, (unwhitened, whitened) in results.items():
        close, raw = cosines(reference[1], whitened), cosines(reference[0], unwhitened)
        print("%-52s %14.5f %14.6f %14.5f" % (name, close.min(), np.median(close), raw.min()))
    print(
        "an int8 product (oneDNN, bias and dequantisation) against float32, 2048 x 384 x 1536: %.1fx" % int8_speedup(tf)
    )


if __name__ == "__main__":
    main()

"""BERT's forward pass on rows of tokens, each Dense one matrix product oneDNN can fuse.

bert4keras applies each Dense to ``(batch, length, hidden)`` tensors, which Keras turns into
reshape, MatMul, reshape, BiasAdd: the reshapes keep Grappler from fusing the bias and the GELU
into the product. This layer computes the same function on ``(tokens, hidden)`` rows, with the
query, key and value projections as one product, so each Dense is one oneDNN inner product with its
bias and GELU as post-ops, and its first call traces sooner (``benchmarks/bench_fused_graph.py``;
figures in docs/performance.md). `bert_whitening.models` reads a checkpoint of the plain BERT it
mirrors straight into it, and builds anything else with bert4keras.

Traced inside `bfloat16_products`, its matrix products (the dense layers and the two attention
products) take and give bfloat16, and everything between them stays float32: the residual
stream, the layer norms, the softmax and what follows the layer. A rewrite pass that picks ops to
round (oneDNN's automatic mixed precision) rounds the residual sums and layer norms that directly
follow a product, which moves the vectors further from float32 for no speed.

Where TensorFlow runs its oneDNN rewrites, each layer normalisation is written as Keras' fused
one (a batch norm over a ``1 x rows x hidden x 1`` tensor), which oneDNN turns into one
``_MklLayerNorm`` in place of six elementwise ops and two reductions; the attention scores' scale
is a product, so that oneDNN folds it and the padding mask into the score product. Without
oneDNN that batch norm is slower than the plain ops, so they are kept there, and in every
SavedModel (`serving_graph`): TF Serving's standard build runs no oneDNN rewrites.

Packed, the products run on the real tokens' rows alone, gathered from the batch; only the
attention sees every position. A training batch is drawn at random and an encoding batch is sorted
by length, so one is mostly padding and the other has little: the first always runs packed, the
second never. A server's batch joins requests of any length, so its graph decides on each batch
by its share of padding (`PACK_ABOVE_PADDING`): gathering and scattering the rows costs more than
a little padding's products.
"""

import contextlib
import contextvars
import functools

import numpy as np

from bert_whitening.backend import keras, tf

#: bert4keras' LayerNormalization epsilon for BERT.
LAYER_NORM_EPSILON = 1e-12
#: In a graph traced for a server (`serving_graph`), a batch with more than this share of padding
#: runs packed (``benchmarks/bench_serving.py``).
PACK_ABOVE_PADDING = 0.25


class FusedBert(keras.layers.Layer):
    """``[input_ids, segment_ids]`` (int32, padding id 0) -> ``[first block, last block]``
    outputs ``(batch, length, hidden)``, then the pooler's ``(batch, hidden)`` (linear, as
    bert4keras' ``with_pool='linear'``) when ``pooler`` is set. Padded keys are masked out of the
    attention as bert4keras masks them; padded positions' outputs are left to the pooling's mask.
    The activation is GELU with erf, bert4keras' ``gelu``.

    Its weights are trainable when the layer is (``trainable=False`` for an encoder that only
    encodes, as `bert_whitening.models` builds one; ``True`` for `bert_whitening.training`).
    Called with ``training=True``, its products are float32 whatever `bfloat16_products` says
    (gradients of bfloat16 products would train on rounding), and they run packed: on the real
    tokens' rows only, gathered from the batch. The outputs at real positions are the inference
    call's, padded positions are zero. There is no dropout. A graph traced for a server
    (`serving_graph`) runs packed the batches that are mostly padding."""

    def __init__(
        self, vocab_size, segment_vocab_size, max_position, hidden, heads, intermediate, blocks, pooler=False, **kwargs
    ):
        super().__init__(**kwargs)
        if hidden % heads:
            raise ValueError("hidden size %d is not a multiple of %d heads" % (hidden, heads))
        self.vocab_size = vocab_size
        self.segment_vocab_size = segment_vocab_size
        self.max_position = max_position
        self.hidden = hidden
        self.heads = heads
        self.intermediate = intermediate
        self.blocks = blocks
        self.pooler = pooler

    def build(self, input_shape):
        def weight(name, shape):
            return self.add_weight(name=name, shape=shape, initializer="zeros", trainable=self.trainable)

        def norm(name):
            return weight(name + "_gamma", (self.hidden,)), weight(name + "_beta", (self.hidden,))

        hidden = self.hidden
        self.token_embeddings = weight("token_embeddings", (self.vocab_size, hidden))
        self.segment_embeddings = weight("segment_embeddings", (self.segment_vocab_size, hidden))
        self.position_embeddings = weight("position_embeddings", (self.max_position, hidden))
        self.embedding_norm = norm("embedding_norm")
        self.block_weights = [
            {
                "qkv": (weight("%d_qkv_kernel" % i, (hidden, 3 * hidden)), weight("%d_qkv_bias" % i, (3 * hidden,))),
                "attention_output": (
                    weight("%d_attention_output_kernel" % i, (hidden, hidden)),
                    weight("%d_attention_output_bias" % i, (hidden,)),
                ),
                "attention_norm": norm("%d_attention_norm" % i),
                "intermediate": (
                    weight("%d_intermediate_kernel" % i, (hidden, self.intermediate)),
                    weight("%d_intermediate_bias" % i, (self.intermediate,)),
                ),
                "output": (
                    weight("%d_output_kernel" % i, (self.intermediate, hidden)),
                    weight("%d_output_bias" % i, (hidden,)),
                ),
                "output_norm": norm("%d_output_norm" % i),
            }
            for i in range(self.blocks)
        ]
        if self.pooler:
            self.pooler_dense = (weight("pooler_kernel", (hidden, hidden)), weight("pooler_bias", (hidden,)))
        super().build(input_shape)

    # The one branch on a tensor is a tf.cond: AutoGraph's conversion would only add to each
    # build's time. The wrapper hides the signature, so Keras passes ``training`` (a Python
    # value when the training loop calls the model; only True changes anything).
    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        ids, segments = inputs
        if training is True:
            return self._forward(ids, segments, tf.float32, packed=True)
        products = _PRODUCTS.get()  # float32, or bfloat16 inside `bfloat16_products`
        if not _SERVING.get():
            return self._forward(ids, segments, products, packed=False)
        padding = 1.0 - tf.math.divide_no_nan(
            tf.cast(tf.math.count_nonzero(ids), tf.float32), tf.cast(tf.size(ids), tf.float32)
        )
        return tf.cond(
            padding > PACK_ABOVE_PADDING,
            lambda: self._forward(ids, segments, products, packed=True),
            lambda: self._forward(ids, segments, products, packed=False),
        )

    def _forward(self, ids, segments, products, packed):
        """The forward pass, its products on every row of the batch or, ``packed``, on the real
        tokens' rows alone, gathered from the batch (only the attention needs every position)."""
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        size = self.hidden // self.heads
        if packed:
            real = tf.cast(tf.where(tf.reshape(ids, [-1]) != 0), tf.int32)  # (tokens, 1)

            def rows(x):  # the real tokens' rows of a (batch * length, ...) tensor
                return tf.gather_nd(x, real)

            def positions(x):  # the real tokens' rows back in place, padding zero
                return tf.scatter_nd(real, x, tf.concat([[batch * length], tf.shape(x)[1:]], 0))

        else:

            def rows(x):
                return x

            positions = rows
        x = (
            tf.gather(self.token_embeddings, ids)
            + tf.gather(self.segment_embeddings, segments)
            + self.position_embeddings[None, :length]
        )
        x = _layer_norm(rows(tf.reshape(x, [batch * length, self.hidden])), self.embedding_norm)
        key_bias = tf.cast(ids == 0, products)[:, None, None, :] * -1e12  # bert4keras: -inf, same softmax
        taps = []
        for i, block in enumerate(self.block_weights):
            y = tf.reshape(positions(_dense(x, block["qkv"], products)), [batch, length, 3, self.heads, size])
            query, key, value = tf.unstack(tf.transpose(y, [2, 0, 3, 1, 4]))
            scores = tf.matmul(query, key, transpose_b=True) * size**-0.5 + key_bias
            scores = tf.cast(tf.nn.softmax(tf.cast(scores, x.dtype)), products)
            context = tf.reshape(tf.transpose(tf.matmul(scores, value), [0, 2, 1, 3]), [batch * length, self.hidden])
            attended = tf.cast(_dense(rows(context), block["attention_output"], products), x.dtype)
            x = _layer_norm(x + attended, block["attention_norm"])
            feed_forward = _dense(_gelu(_dense(x, block["intermediate"], products)), block["output"], products)
            x = _layer_norm(x + tf.cast(feed_forward, x.dtype), block["output_norm"])
            if i in (0, self.blocks - 1):
                taps.append(tf.reshape(positions(x), [batch, length, self.hidden]))
        outputs = [taps[0], taps[-1]]
        if self.pooler:
            outputs.append(tf.cast(_dense(outputs[-1][:, 0], self.pooler_dense, products), x.dtype))
        return outputs

    def get_config(self):
        names = ("vocab_size", "segment_vocab_size", "max_position", "hidden", "heads", "intermediate", "blocks")
        return {**super().get_config(), **{name: getattr(self, name) for name in names}, "pooler": self.pooler}


def _dense(x, kernel_bias, dtype):
    copies = (_KERNELS.get() if dtype == tf.bfloat16 else None) or {}
    kernel, bias = (copies[w.ref()] if w.ref() in copies else tf.cast(w, dtype) for w in kernel_bias)
    return tf.nn.bias_add(tf.matmul(tf.cast(x, dtype), kernel), bias)


def _gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / np.sqrt(2.0)))


#: The dtype of the matrix products in a graph traced now (`bfloat16_products`).
_PRODUCTS = contextvars.ContextVar("products", default=tf.float32)
#: bfloat16 copies of weights, by the float32 weight's ``ref()``, read in their place (`bfloat16_copies`).
_KERNELS = contextvars.ContextVar("bfloat16_copies", default=None)


@contextlib.contextmanager
def bfloat16_products(copies=None):
    """Trace the layer's graph with its matrix products in bfloat16, everything else in float32.
    Each product's weights are cast at each call, or read from ``copies`` (`bfloat16_copies`):
    a graph served one sentence at a time spends more on the casts than the products gain."""
    tokens = _PRODUCTS.set(tf.bfloat16), _KERNELS.set(copies)
    try:
        yield
    finally:
        _PRODUCTS.reset(tokens[0])
        _KERNELS.reset(tokens[1])


def bfloat16_copies(model):
    """``{weight.ref(): bfloat16 variable}`` of the weights of every product of ``model``'s
    `FusedBert` layers: the copies a bfloat16 SavedModel stores in place of the float32 ones."""
    copies = {}
    for layer in model.layers:
        if isinstance(layer, FusedBert):
            dense = [
                block[name]
                for block in layer.block_weights
                for name in ("qkv", "attention_output", "intermediate", "output")
            ]
            if layer.pooler:
                dense.append(layer.pooler_dense)
            for weight in (weight for pair in dense for weight in pair):
                copies[weight.ref()] = tf.Variable(tf.cast(weight, tf.bfloat16), trainable=False)
    return copies


#: True while a graph is traced for a server to run (`serving_graph`).
_SERVING = contextvars.ContextVar("serving_graph", default=False)


@contextlib.contextmanager
def serving_graph():
    """Trace the layer's graph for a server: plain ops only, for a TensorFlow that may run no
    oneDNN rewrites, and a batch that is mostly padding packed, as requests of mixed lengths
    batched together are."""
    token = _SERVING.set(True)
    try:
        yield
    finally:
        _SERVING.reset(token)


@functools.lru_cache(maxsize=None)
def _onednn_rewrites():
    """Whether this process's TensorFlow runs oneDNN's graph rewrites: on x86 unless
    ``TF_ENABLE_ONEDNN_OPTS=0`` (`bert_whitening.backend` turns them on where TensorFlow would
    not, on CPUs without AVX512_VNNI)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _layer_norm(x, gamma_beta):
    gamma, beta = gamma_beta
    if _onednn_rewrites() and not _SERVING.get():
        # Each row a channel of an NCHW batch norm in training mode (its own mean and variance).
        shape = tf.shape(x)
        ones, zeros = tf.fill(shape[:1], 1.0), tf.fill(shape[:1], 0.0)
        nothing = tf.constant([], tf.float32)
        normalized = tf.raw_ops.FusedBatchNormV3(
            x=tf.reshape(x, [1, shape[0], shape[1], 1]),
            scale=ones,
            offset=zeros,
            mean=nothing,
            variance=nothing,
            epsilon=LAYER_NORM_EPSILON,
            data_format="NCHW",
            is_training=True,
        )[0]
        return tf.reshape(normalized, shape) * gamma + beta
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * gamma + beta

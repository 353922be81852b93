"""Sentence-BERT's classification objective (Reimers and Gurevych, 2019, arXiv:1908.10084):
a Dense of ``num_labels`` outputs with a softmax on ``[u, v, |u - v|]`` of the two sentence
vectors, trained with cross-entropy against the class of the pair.

The head exists for training only: the encoder it shapes is kept, the head is discarded (its
shape is recorded in ``training.json``). Labels are class indices ``0 .. num_labels - 1``.
"""

import numpy as np

from bert_whitening.backend import tf


def pair_features(first, second):
    """``[u, v, |u - v|]`` of the two ``(pairs, dim)`` vector sets: ``(pairs, 3 * dim)``."""
    return tf.concat([first, second, tf.abs(first - second)], axis=-1)


def softmax_loss(labels, first, second, kernel, bias):
    """Mean cross-entropy of the softmax of ``[u, v, |u - v|] @ kernel + bias`` against the
    integer ``labels`` (computed from the logits: no softmax is rounded to 0 before its log)."""
    logits = tf.matmul(pair_features(first, second), kernel) + bias
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
    return tf.reduce_mean(cross_entropy)


class SoftmaxHead(tf.Module):
    """The head's kernel ``(3 * dim, num_labels)`` and bias, drawn from ``seed`` as
    sentence-transformers' ``SoftmaxLoss`` starts them (torch's ``nn.Linear``: each uniform in
    +-1/sqrt(3 * dim)), so that one seed gives one training run.

    Not Keras' Dense start (Glorot uniform, +-sqrt(6 / (3 * dim + num_labels)), 2.4 times wider
    for a 384-dimensional encoder): at the learning rate of fine-tuning, Adam moves each weight
    by about that rate a step, so a wide random kernel barely moves in an epoch and the encoder
    is trained to fit a random projection of ``[u, v, |u - v|]`` (measured against SoftmaxLoss:
    docs/performance-history.md)."""

    def __init__(self, dim, num_labels, seed=0):
        super().__init__(name="softmax_head")
        limit = 1 / np.sqrt(3 * dim)
        rng = np.random.default_rng(seed)
        kernel = rng.uniform(-limit, limit, (3 * dim, num_labels)).astype(np.float32)
        self.kernel = tf.Variable(kernel, name="kernel")
        self.bias = tf.Variable(rng.uniform(-limit, limit, num_labels).astype(np.float32), name="bias")

    @property
    def shape(self):
        """``[3 * dim, num_labels]``, what ``training.json`` records of the discarded head."""
        return list(self.kernel.shape)

    def __call__(self, labels, first, second):
        return softmax_loss(labels, first, second, self.kernel, self.bias)

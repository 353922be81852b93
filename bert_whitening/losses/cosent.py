"""CoSENT (kexue.fm/archives/8847): a ranking loss on the cosines of a batch of sentence pairs.

For every two pairs of the batch whose labels are ordered, label(i, j) > label(k, l), the loss
asks for cos(i, j) > cos(k, l):

    L = log(1 + sum over those (i, j), (k, l) of exp(scale * (cos(k, l) - cos(i, j))))

It trains on the cosine itself, the quantity the encoder is used with, and it needs only the
order of the labels, so 0/1 labels and 0-5 scores are both taken as they are. Pairs of equal
labels give no term; a batch whose labels are all equal gives log(1) = 0.
"""

import numpy as np

from bert_whitening.backend import tf
from bert_whitening.names import COSENT_SCALE


def cosent_loss(labels, cosines, scale=COSENT_SCALE):
    """The CoSENT loss of a batch: ``labels`` and ``cosines`` are ``(pairs,)``.

    Written as a log-sum-exp over the ordered differences and one zero (the ``1 +``): the
    largest term is taken out before the exponentials, so a large ``scale`` or cosine gap
    cannot overflow, and the gradient is a softmax over the terms.
    """
    cosines = tf.convert_to_tensor(cosines)
    labels = tf.cast(labels, cosines.dtype)
    # [a, b] = scale * (cos_b - cos_a): the term of a pair a ranked above a pair b
    differences = scale * (cosines[None, :] - cosines[:, None])
    ordered = labels[:, None] > labels[None, :]
    terms = tf.where(ordered, differences, tf.constant(-np.inf, cosines.dtype))
    return tf.reduce_logsumexp(tf.concat([tf.zeros([1], cosines.dtype), tf.reshape(terms, [-1])], axis=0))

"""CoSENT (kexue.fm/archives/8847): a ranking loss on the cosines of a batch of sentence pairs.

For every two pairs of the batch whose labels are ordered, label(i, j) > label(k, l), the loss
asks for cos(i, j) > cos(k, l):

    L = log(1 + sum over those (i, j), (k, l) of exp(scale * (cos(k, l) - cos(i, j))))

It trains on the cosine itself, the quantity the encoder is used with, and it needs only the
order of the labels, so 0/1 labels and 0-5 scores are both taken as they are. Pairs of equal
labels give no term; a batch whose labels are all equal gives log(1) = 0.
"""

import numpy as np

from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import COSENT_SCALE

#: The largest scale taken. Already there the loss is its largest term alone (a cosine gap of
#: 1e-3 weighs e^10 to 1); beyond, only the gradients grow with it, until Adam's squared moments
#: leave float32 and the loss stops being finite, which would be blamed on the learning rate.
MAX_SCALE = 1e4


def cosent_loss(labels, cosines, scale=COSENT_SCALE):
    """The CoSENT loss of a batch: ``labels`` and ``cosines`` are ``(pairs,)``.

    Written as a log-sum-exp over the ordered differences and one zero (the ``1 +``): the
    largest term is taken out before the exponentials, so a large ``scale`` or cosine gap
    cannot overflow, and the gradient is a softmax over the terms.
    """
    from bert_whitening.backend import tf

    cosines = tf.convert_to_tensor(cosines)
    labels = tf.cast(labels, cosines.dtype)
    # [a, b] = scale * (cos_b - cos_a): the term of a pair a ranked above a pair b
    differences = scale * (cosines[None, :] - cosines[:, None])
    ordered = labels[:, None] > labels[None, :]
    terms = tf.where(ordered, differences, tf.constant(-np.inf, cosines.dtype))
    return tf.reduce_logsumexp(tf.concat([tf.zeros([1], cosines.dtype), tf.reshape(terms, [-1])], axis=0))


class CoSENT:
    """CoSENT as a training loss (`bert_whitening.losses`' protocol): ``scale`` from the options,
    no variables of its own."""

    name = "cosent"

    @staticmethod
    def check(options):
        if options.threshold is not None:
            raise BertWhiteningError(
                "--threshold binarises the softmax loss's labels; CoSENT takes graded labels as they are"
            )
        if options.batch_size < 2:
            raise BertWhiteningError("batch_size 1 gives CoSENT nothing to compare: it ranks the pairs of a batch")

    def __init__(self, options):
        self.scale = options.scale

    def prepare_labels(self, pairs):
        """The ranks of the labels, float32. CoSENT compares labels alone (which pair should be
        the closer): their ranks order the pairs as they do, in float32 exactly, where labels
        cast to float32 could overflow (1e39) or round to one value (1e-50, or 1 + 1e-9), and
        the loss then saw no order."""
        return np.unique(pairs.labels, return_inverse=True)[1].astype(np.float32)

    def settings(self):
        return {"scale": self.scale, "threshold": None}

    def build(self, dim):
        return []

    def __call__(self, labels, first, second):
        from bert_whitening.backend import tf

        cosines = tf.reduce_sum(tf.math.l2_normalize(first, -1) * tf.math.l2_normalize(second, -1), -1)
        return cosent_loss(labels, cosines, self.scale)

    def record(self):
        return {"softmax_head": None}

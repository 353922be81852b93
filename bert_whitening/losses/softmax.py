"""Sentence-BERT's classification objective (Reimers and Gurevych, 2019, arXiv:1908.10084):
a Dense of ``num_labels`` outputs with a softmax on ``[u, v, |u - v|]`` of the two sentence
vectors, trained with cross-entropy against the class of the pair.

The head exists for training only: the encoder it shapes is kept, the head is discarded (its
shape is recorded in ``training.json``). Labels are class indices ``0 .. num_labels - 1``:
integer labels are classes ``0 .. max``; other (graded) labels, or any with ``threshold``
given, are binarised: 1 above the threshold, else 0 (`softmax_classes`).
"""

import logging

import numpy as np

from bert_whitening.data import display_name
from bert_whitening.errors import DataError
from bert_whitening.io.bounded import first_few

logger = logging.getLogger(__name__)

#: Graded labels (not whole numbers) are binarised here unless told otherwise: the middle of
#: senteval_cn's 0-5 STS scores.
DEFAULT_THRESHOLD = 2.5
#: The most classes the softmax loss takes (labels 0 .. SOFTMAX_CLASSES - 1): Sentence-BERT's
#: task, NLI, has three; a stray large label would otherwise size the head (a label of 1e9: a
#: head of GBs).
SOFTMAX_CLASSES = 1024


def softmax_classes(pairs, threshold=None):
    """``(classes, num_labels, how)`` of the pairs' labels (a `PairFile`): whole numbers are
    classes ``0 .. max``, unless ``threshold`` is given; otherwise (graded labels, or a
    threshold) 1 above ``threshold`` (default `DEFAULT_THRESHOLD`), else 0."""
    labels, name = pairs.labels, display_name(pairs.path)
    if threshold is None and np.all(labels == np.round(labels)):
        return _integer_classes(labels, name)
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    classes = (labels > threshold).astype(np.int32)
    if np.all(classes == classes[0]):
        raise DataError(
            "%s:1-%d: every label is %s threshold %g: one class, nothing to learn"
            % (name, len(labels), "above" if classes[0] else "at or below", threshold)
        )
    return classes, 2, "labels above %g as 1, the others as 0" % threshold


def _integer_classes(labels, name):
    negative = np.flatnonzero(labels < 0)
    if len(negative):
        raise DataError(
            "%s:%d: label %g is out of range: softmax classes are the integers 0, 1, 2, ... "
            "(give a threshold, --threshold, to binarise graded labels)" % (name, negative[0] + 1, labels[negative[0]])
        )
    largest = int(labels.max())
    if largest >= SOFTMAX_CLASSES:
        at = int(np.argmax(labels))
        raise DataError(
            "%s:%d: label %d makes %d classes, more than the softmax loss takes (%d); give a threshold, "
            "--threshold, to binarise graded labels" % (name, at + 1, largest, largest + 1, SOFTMAX_CLASSES)
        )
    classes = labels.astype(np.int32)
    empty = sorted(set(range(largest + 1)) - set(classes.tolist()))
    if empty:
        logger.warning(
            "%s: no pair has %s %s: the softmax head keeps %s of its %d classes unused",
            name,
            "label" if len(empty) == 1 else "labels",
            first_few([str(label) for label in empty]),
            "one" if len(empty) == 1 else len(empty),
            largest + 1,
        )
    return classes, largest + 1, "integer labels as classes"


def pair_features(first, second):
    """``[u, v, |u - v|]`` of the two ``(pairs, dim)`` vector sets: ``(pairs, 3 * dim)``."""
    from bert_whitening.backend import tf

    return tf.concat([first, second, tf.abs(first - second)], axis=-1)


def softmax_loss(labels, first, second, kernel, bias):
    """Mean cross-entropy of the softmax of ``[u, v, |u - v|] @ kernel + bias`` against the
    integer ``labels`` (computed from the logits: no softmax is rounded to 0 before its log)."""
    from bert_whitening.backend import tf

    logits = tf.matmul(pair_features(first, second), kernel) + bias
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
    return tf.reduce_mean(cross_entropy)


class SoftmaxHead:
    """The head's kernel ``(3 * dim, num_labels)`` and bias, drawn from ``seed`` as
    sentence-transformers' ``SoftmaxLoss`` starts them (torch's ``nn.Linear``: each uniform in
    +-1/sqrt(3 * dim)), so that one seed gives one training run.

    Not Keras' Dense start (Glorot uniform, +-sqrt(6 / (3 * dim + num_labels)), 2.4 times wider
    for a 384-dimensional encoder): at the learning rate of fine-tuning, Adam moves each weight
    by about that rate a step, so a wide random kernel barely moves in an epoch and the encoder
    is trained to fit a random projection of ``[u, v, |u - v|]`` (measured against SoftmaxLoss:
    docs/performance-history.md)."""

    def __init__(self, dim, num_labels, seed=0):
        from bert_whitening.backend import tf

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


class Softmax:
    """Sentence-BERT's softmax as a training loss (`bert_whitening.losses`' protocol): the
    options' ``threshold`` and ``seed`` (the head's start); its classes from the labels, its
    head built on the encoder's width."""

    name = "softmax"

    @staticmethod
    def check(options):
        """Every option is the softmax's to take."""

    def __init__(self, options):
        self.threshold, self.seed = options.threshold, options.seed
        self.num_labels = self.classes = self.head = None

    def prepare_labels(self, pairs):
        """The pairs' classes, int32 (`softmax_classes`)."""
        targets, self.num_labels, self.classes = softmax_classes(pairs, self.threshold)
        return targets

    def settings(self):
        return {"scale": None, "threshold": self.threshold}

    def build(self, dim):
        self.head = SoftmaxHead(dim, self.num_labels, self.seed)
        return [self.head.kernel, self.head.bias]

    def __call__(self, labels, first, second):
        return self.head(labels, first, second)

    def record(self):
        return {"softmax_head": {"shape": self.head.shape, "classes": self.classes, "kept": False}}

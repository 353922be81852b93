"""The training losses against plain numpy written here from their definitions: CoSENT as the
double sum over ordered pairs of pairs (kexue.fm/archives/8847), Sentence-BERT's head as
logits, log-softmax and the mean negative log-likelihood."""

import math

import numpy as np
import pytest

from bert_whitening.losses import SoftmaxHead, cosent_loss, softmax_loss


def numpy_cosent(labels, cosines, scale=20.0):
    total = 1.0
    for a in range(len(labels)):
        for b in range(len(labels)):
            if labels[a] > labels[b]:
                total += math.exp(scale * (cosines[b] - cosines[a]))
    return math.log(total)


def numpy_softmax(labels, first, second, kernel, bias):
    features = np.concatenate([first, second, np.abs(first - second)], axis=1).astype(np.float64)
    logits = features @ kernel + bias
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean([log_probabilities[row, label] for row, label in enumerate(labels)])


@pytest.mark.parametrize("seed", range(4))
def test_cosent_equals_the_double_sum(seed):
    """Random cosines and labels drawn from few values, so that ties (which give no term) occur."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, 12).astype(np.float32)
    assert len(set(labels)) < len(labels)  # ties
    cosines = rng.uniform(-1, 1, 12).astype(np.float32)
    for scale in (20.0, 1.0, 5.0):
        expected = numpy_cosent(labels, cosines.astype(np.float64), scale)
        actual = float(cosent_loss(labels, cosines, scale))
        assert actual == pytest.approx(expected, rel=1e-5), scale


def test_cosent_gives_equal_labels_no_term():
    """Two pairs of equal labels: no term, whatever their cosines; graded labels are taken by order."""
    assert float(cosent_loss(np.array([1.0, 1.0]), np.array([0.9, -0.9]))) == 0.0
    labels, cosines = np.array([3.2, 3.2, 0.5]), np.array([0.1, 0.7, 0.4])
    expected = numpy_cosent(labels, cosines)
    assert float(cosent_loss(labels, cosines)) == pytest.approx(expected, rel=1e-6)
    # the terms (0, 2) and (1, 2); none for the tie (0, 1)
    assert expected == pytest.approx(math.log(1 + math.exp(20 * 0.3) + math.exp(-20 * 0.3)), rel=1e-9)


@pytest.mark.parametrize("label", [0.0, 1.0, 4.5])
def test_cosent_of_one_distinct_label_is_zero(label):
    cosines = np.random.default_rng(1).uniform(-1, 1, 8).astype(np.float32)
    assert float(cosent_loss(np.full(8, label), cosines)) == 0.0


def test_cosent_does_not_overflow():
    """A scale and gap that overflow exp() in float32 give the large finite value log-sum-exp gives."""
    labels, cosines = np.array([1.0, 0.0], np.float32), np.array([-1.0, 1.0], np.float32)
    loss = float(cosent_loss(labels, cosines, scale=100.0))
    assert loss == pytest.approx(200.0, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_softmax_head_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    classes = 3
    first, second = (rng.normal(size=(10, 6)).astype(np.float32) for _ in range(2))
    labels = rng.integers(0, classes, 10)
    kernel = rng.normal(size=(18, classes)).astype(np.float32)
    bias = rng.normal(size=classes).astype(np.float32)
    expected = numpy_softmax(labels, first, second, kernel.astype(np.float64), bias.astype(np.float64))
    assert float(softmax_loss(labels, first, second, kernel, bias)) == pytest.approx(expected, rel=1e-5)


def test_softmax_head_is_seeded_and_shaped():
    head, again, other = SoftmaxHead(6, 2, seed=3), SoftmaxHead(6, 2, seed=3), SoftmaxHead(6, 2, seed=4)
    assert head.shape == [18, 2]
    for weight in ("kernel", "bias"):
        np.testing.assert_array_equal(getattr(head, weight).numpy(), getattr(again, weight).numpy())
        assert not np.array_equal(getattr(head, weight).numpy(), getattr(other, weight).numpy())
    rng = np.random.default_rng(0)
    first, second = (rng.normal(size=(4, 6)).astype(np.float32) for _ in range(2))
    labels = np.array([0, 1, 1, 0])
    expected = numpy_softmax(labels, first, second, head.kernel.numpy().astype(np.float64), head.bias.numpy())
    assert float(head(labels, first, second)) == pytest.approx(expected, rel=1e-5)


def test_softmax_head_starts_as_sentence_transformers_softmax_loss():
    """torch's nn.Linear start, kernel and bias uniform in +-1/sqrt(fan_in), fan_in = 3 * dim:
    spread over that range, not Keras' Glorot range (2.4 times wider at dim 384)."""
    head = SoftmaxHead(384, 2, seed=0)
    limit = 1 / np.sqrt(3 * 384)
    kernel, bias = head.kernel.numpy(), head.bias.numpy()
    assert np.abs(kernel).max() <= limit and np.abs(bias).max() <= limit
    assert np.abs(kernel).max() > 0.99 * limit and kernel.std() == pytest.approx(limit / np.sqrt(3), rel=0.05)
    assert bias.any()


def test_cosent_orders_fractional_labels_as_they_are():
    """Labels of one whole number apart by less than 1 (0.2 < 0.7 < 0.9) are ordered: each
    ordered pair of pairs gives its term, none is lost to a cut to integers."""
    labels, cosines = np.array([0.2, 0.7, 0.9]), np.array([0.5, 0.1, -0.3])
    expected = numpy_cosent(labels, cosines, scale=5.0)
    # (0.7 above 0.2), (0.9 above 0.2), (0.9 above 0.7): cos_b - cos_a of each
    assert expected == pytest.approx(math.log(1 + math.exp(5 * 0.4) + math.exp(5 * 0.8) + math.exp(5 * 0.4)), rel=1e-12)
    assert float(cosent_loss(labels, cosines, 5.0)) == pytest.approx(expected, rel=1e-6)

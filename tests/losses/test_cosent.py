"""CoSENT (`bert_whitening.losses.cosent`) against plain numpy written here from its definition:
the double sum over ordered pairs of pairs (kexue.fm/archives/8847)."""

import math

import numpy as np
import pytest

from bert_whitening.losses import cosent_loss

from reference import numpy_cosent


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


def test_cosent_orders_fractional_labels_as_they_are():
    """Labels of one whole number apart by less than 1 (0.2 < 0.7 < 0.9) are ordered: each
    ordered pair of pairs gives its term, none is lost to a cut to integers."""
    labels, cosines = np.array([0.2, 0.7, 0.9]), np.array([0.5, 0.1, -0.3])
    expected = numpy_cosent(labels, cosines, scale=5.0)
    # (0.7 above 0.2), (0.9 above 0.2), (0.9 above 0.7): cos_b - cos_a of each
    assert expected == pytest.approx(math.log(1 + math.exp(5 * 0.4) + math.exp(5 * 0.8) + math.exp(5 * 0.4)), rel=1e-12)
    assert float(cosent_loss(labels, cosines, 5.0)) == pytest.approx(expected, rel=1e-6)

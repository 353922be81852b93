"""Sentence-BERT's softmax head (`bert_whitening.losses.softmax`) against plain numpy written
here from its definition (logits, log-softmax and the mean negative log-likelihood), its start,
and the classes it makes of a pair file's labels."""

import numpy as np
import pytest

from bert_whitening.errors import DataError
from bert_whitening.losses import SoftmaxHead, softmax, softmax_loss
from bert_whitening.training import read_pair_file

from helpers import bad
from reference import numpy_softmax


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


def test_a_softmax_label_that_would_make_a_head_of_gbs_is_refused_and_unused_classes_are_said(
    tiny_model, tmp_path, caplog
):
    huge = read_pair_file(bad(tmp_path, "huge.data", [("a", "b", "0"), ("c", "d", "1000000000")]))
    with pytest.raises(
        DataError, match=r"huge.data:2: label 1000000000 makes 1000000001 classes, more than the softmax"
    ):
        softmax.softmax_classes(huge)
    largest = softmax.SOFTMAX_CLASSES - 1
    at_most = read_pair_file(bad(tmp_path, "most.data", [("a", "b", "0"), ("c", "d", str(largest))]))
    assert softmax.softmax_classes(at_most)[1] == softmax.SOFTMAX_CLASSES
    beyond = read_pair_file(bad(tmp_path, "beyond.data", [("a", "b", "0"), ("c", "d", str(largest + 1))]))
    with pytest.raises(DataError, match=r"beyond.data:2: label 1024 makes 1025 classes, more than the softmax"):
        softmax.softmax_classes(beyond)
    sparse = read_pair_file(bad(tmp_path, "sparse.data", [("a", "b", "0"), ("c", "d", "7")]))
    assert softmax.softmax_classes(sparse)[1] == 8
    assert "sparse.data: no pair has labels 1, 2, 3 and 3 more: the softmax head keeps 6 of its 8 classes unused" in (
        caplog.text
    )


def test_graded_softmax_labels_are_binarised(tiny_model, tmp_path):
    pairs = read_pair_file(bad(tmp_path, "graded.data", [("a", "b", "4.2"), ("c", "d", "1.5"), ("e", "f", "2.5")]))
    classes, count, how = softmax.softmax_classes(pairs)
    assert classes.tolist() == [1, 0, 0] and count == 2 and how == "labels above 2.5 as 1, the others as 0"
    classes, count, _ = softmax.softmax_classes(pairs, threshold=2.0)
    assert classes.tolist() == [1, 0, 1]
    integers = read_pair_file(bad(tmp_path, "classes.data", [("a", "b", "0"), ("c", "d", "2")]))
    classes, count, how = softmax.softmax_classes(integers)
    assert classes.tolist() == [0, 2] and count == 3
    assert softmax.softmax_classes(integers, threshold=1.0)[0].tolist() == [0, 1]

"""`bert_whitening.training.adam.Adam` against the textbook's steps (tests/reference.py)."""

import numpy as np
import pytest

from bert_whitening.backend import tf
from bert_whitening.training.adam import Adam

from reference import adam_steps


def _gradients(rng, scale, steps, shape):
    return [(rng.standard_normal(shape) * scale).astype(np.float32) for _ in range(steps)]


@pytest.mark.parametrize("scale", [1e-2, 1e-6, 1e-9])
def test_steps_equal_the_textbook(scale):
    """Gradients near and below the epsilon are where its place shows: with the same epsilon
    on the uncorrected root (where tf-keras' Adam puts it), a weight whose gradient is 1e-9
    moves about a thirtieth as far at the first step as on the corrected one."""
    rng = np.random.default_rng(0)
    start = (rng.standard_normal((3, 4)) * 1e-3).astype(np.float32)  # float32 resolves the steps
    gradients = _gradients(rng, scale, 5, start.shape)
    variable = tf.Variable(start)
    adam = Adam([variable], learning_rate=1e-3)
    for gradient in gradients:
        adam.apply([tf.constant(gradient)])
    expected = adam_steps(start, gradients, 1e-3)
    np.testing.assert_allclose(variable.numpy() - start, expected - start, rtol=1e-4, atol=1e-10)


def test_the_state_is_the_step_count_then_the_moments():
    first, second = tf.Variable(np.ones(2, np.float32)), tf.Variable(np.ones((2, 3), np.float32))
    adam = Adam([first, second], learning_rate=0.1)
    adam.apply([tf.constant([1.0, -1.0]), tf.constant(np.full((2, 3), 2.0, np.float32))])
    steps, m_first, m_second, v_first, v_second = adam.state
    assert int(steps.numpy()) == 1
    np.testing.assert_allclose(m_first.numpy(), [0.1, -0.1], rtol=1e-6)
    np.testing.assert_allclose(v_second.numpy(), np.full((2, 3), 0.004), rtol=1e-4)
    assert m_second.shape == (2, 3) and v_first.shape == (2,)


def test_a_sparse_gradient_decays_every_row():
    """An embedding's gradient is an IndexedSlices; every row's moments decay, as torch's
    dense embedding gradient makes them."""
    table = tf.Variable(np.zeros((4, 2), np.float32))
    adam = Adam([table], learning_rate=0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1]) * 3.0)
    adam.apply(tape.gradient(loss, [table]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [2]) * 3.0)
    adam.apply(tape.gradient(loss, [table]))
    gradients = [np.zeros((4, 2)), np.zeros((4, 2))]
    gradients[0][1], gradients[1][2] = 3.0, 3.0
    np.testing.assert_allclose(table.numpy(), adam_steps(np.zeros((4, 2)), gradients, 0.1), rtol=1e-5, atol=1e-8)


def test_a_wrong_number_of_gradients_is_refused():
    adam = Adam([tf.Variable([1.0])], learning_rate=0.1)
    with pytest.raises(ValueError, match="zip"):
        adam.apply([tf.constant([1.0]), tf.constant([1.0])])

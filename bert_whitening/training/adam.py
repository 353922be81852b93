"""Adam as Kingma and Ba wrote it (arXiv:1412.6980, Algorithm 1), for `bert_whitening.training`.

The epsilon is added to the bias-corrected root ``sqrt(v / (1 - beta_2 ** t))``, as torch's
``Adam`` (which sentence-transformers trains with) and bert4keras' ``Adam`` (which bojone/CoSENT
trains with) add it. tf-keras' ``Adam`` adds it to the uncorrected ``sqrt(v)``: an epsilon
``1 / sqrt(1 - beta_2 ** t)`` times larger in the textbook's terms, about 32 times at the first
step and still 2.6 times after an epoch of STS-B. Each weight whose gradient is not far above
that epsilon takes a shorter step than the textbook's: another optimizer, if not by much. From
the same weights and batches, tf-keras' Adam left sentence-transformers' trajectory at the second
step; this one follows it (``make verify-train``).

One fused ``ResourceApplyAdam`` per variable does the update. Its own formula puts the epsilon
on the uncorrected root too, so it is handed ``epsilon * sqrt(1 - beta_2 ** t)``, which is the
textbook's update exactly.
"""

from bert_whitening.backend import tf


class Adam(tf.Module):
    """Adam for a fixed list of ``variables``; its state is `state` (a checkpoint saves it).

    Args:
        variables: the float32 variables it updates, in the order `apply` takes gradients.
        learning_rate: the constant step size (no warm-up, no decay, no weight decay).
        beta_1, beta_2, epsilon: the textbook's (and torch's) defaults.
    """

    def __init__(self, variables, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
        super().__init__(name="adam")
        self.targets = list(variables)
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")

        def zeros(variable, moment):
            name = "%s/%s" % (variable.name.split(":")[0], moment)
            return tf.Variable(tf.zeros(variable.shape, variable.dtype), trainable=False, name=name)

        self.first_moments = [zeros(variable, "m") for variable in self.targets]
        self.second_moments = [zeros(variable, "v") for variable in self.targets]

    @property
    def state(self):
        """Every variable of the optimizer, in a fixed order: the step count, then the first
        moments, then the second moments, each in the order of the variables."""
        return [self.steps] + self.first_moments + self.second_moments

    def apply(self, gradients):
        """One step: each variable moved by its gradient (dense; an embedding's sparse gradient
        is made dense, so that every row's moments decay as torch's do)."""
        step = tf.cast(self.steps.assign_add(1), tf.float32)
        beta_1_power, beta_2_power = self.beta_1**step, self.beta_2**step
        epsilon = self.epsilon * tf.sqrt(1 - beta_2_power)
        moments = zip(self.targets, self.first_moments, self.second_moments, gradients, strict=True)
        for variable, m, v, gradient in moments:
            tf.raw_ops.ResourceApplyAdam(
                var=variable.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=beta_1_power,
                beta2_power=beta_2_power,
                lr=tf.constant(self.learning_rate, tf.float32),
                beta1=tf.constant(self.beta_1, tf.float32),
                beta2=tf.constant(self.beta_2, tf.float32),
                epsilon=epsilon,
                grad=tf.convert_to_tensor(gradient),
            )

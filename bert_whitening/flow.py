"""BERT-flow (Li et al., EMNLP 2020, arXiv:2011.05864) beside whitening: a Glow-style normalising
flow trained by maximum likelihood on pooled sentence vectors, whose latent is the sentence vector.

It follows bohanli/BERT-flow (commit 7fa8f6d) wherever the result depends on it: configuration,
shape, steps, levels, objective, initialisation, training and vectors, each with the file of
BERT-flow it comes from, are in docs/evaluation.md ("What flow.py takes from BERT-flow"), with
the differences made on purpose.

Determinism: initial values and the shuffling come from ``numpy.random.default_rng(seed)``; no
TensorFlow random op runs, and with no dropout training is a fixed sequence of CPU ops.
``tf.config.experimental.enable_op_determinism`` is not called: it is process-wide and cannot be
undone. The tests check that two fits with one seed give identical vectors.
"""

import dataclasses
import difflib
import json
import logging
import math
import numbers
import time
from collections.abc import Mapping

import numpy as np
import scipy.linalg

from bert_whitening.arguments import boolean, number, positive_int, shown, vector_array
from bert_whitening.backend import graph_function, keras, tf
from bert_whitening.errors import FlowError
from bert_whitening.io.atomic import write_stream_atomically
from bert_whitening.io.bounded import FLOW_BYTES, FLOW_SIZES, JSON_BYTES, MODEL_SIZES, NpzMembers, first_few
from bert_whitening.io.records import ANY, Schema, parse_record
from bert_whitening.names import RECORDED_POOLINGS, check_recorded, checked_tokenization
from bert_whitening.precision import refuse_frozen_weights
from bert_whitening.progress import progress_of
from bert_whitening.vectors import check_vectors

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
#: What a flow file's metadata holds; its values are checked further by `Flow.load`.
METADATA = Schema(
    required={"format_version": ANY, "dim": ANY, "config": ANY},
    optional={"model_identity": (dict, type(None))},
)
#: Glow's ``logscale_factor``: actnorm and the coupling's last layer scale by ``exp(3 logs)``.
LOGSCALE = 3.0
#: AdamWeightDecay of ``optimization_bert_flow.py``.
BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01
#: BERT-flow clips at 1 a loss twice the mean NLL of a batch (see the module docstring).
CLIP_NORM = 0.5
#: The keys of BERT-flow's configuration files that have one implemented value.
FIXED_KEYS = {
    "latent_architecture": "glow_resnet",
    "activation": "relu",
    "coupling_dropout": 0.0,
    "top_prior": "normal",
    "use_fp16": False,
}


@dataclasses.dataclass(frozen=True)
class FlowConfig:
    """The flow's shape; the defaults are ``config_l3_d3_w32.json``."""

    n_levels: int = 3
    depth: int = 3
    coupling: str = "additive"
    coupling_width: int = 32
    permutation: bool = True
    data_init: bool = False

    @classmethod
    def of(cls, values=None):
        """A `FlowConfig`, from one, None (the default) or a dict of its fields or of a BERT-flow
        ``flow/config/*.json`` (whose other keys must hold the values implemented here)."""
        if isinstance(values, cls):
            return values
        if values is not None and not isinstance(values, Mapping):
            raise FlowError(
                "config must be a FlowConfig, a dict or None, got %s %s" % (type(values).__name__, shown(values))
            )
        values = dict(values or {})
        strange = [key for key in values if not isinstance(key, str)]
        if strange:
            raise FlowError("flow config keys must be str, got %s" % shown(strange[0]))
        for key, value in FIXED_KEYS.items():
            if values.pop(key, value) != value:
                raise FlowError("flow config %s must be %r here" % (key, value))
        unknown = sorted(set(values) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise FlowError("unknown flow config keys: %s" % ", ".join(unknown))
        return cls(**values)

    def __post_init__(self):
        """Refuse a field of the wrong type or beyond `FLOW_SIZES`, whoever builds the
        configuration (`of`, a flow file, ``FlowConfig(...)``): a ``"false"`` for a bool would
        be taken as true and build the flow it says not to."""
        if not isinstance(self.coupling, str) or self.coupling not in ("additive", "affine"):
            raise FlowError("flow coupling must be additive or affine, got %r" % (self.coupling,))
        for key, largest in FLOW_SIZES.items():
            value = getattr(self, key)
            if type(value) is not int or not 1 <= value <= largest:
                raise FlowError("flow %s is %r, expected a whole number from 1 to %d" % (key, value, largest))
        for key in ("permutation", "data_init"):  # numpy's bools kept as Python's: the file's JSON holds them
            object.__setattr__(self, key, boolean(getattr(self, key), "flow " + key, FlowError))

    def check(self, dim):
        """Refuse, before a weight is made, a dimension the levels cannot halve (the last level's
        coupling halves it too), or a flow whose weights would take more than `FLOW_BYTES`."""
        if type(dim) is not int or not 1 <= dim <= MODEL_SIZES["hidden_size"]:
            raise FlowError(
                "a flow's dimension is %r, expected a whole number from 1 to %d" % (dim, MODEL_SIZES["hidden_size"])
            )
        if dim % 2**self.n_levels:
            raise FlowError(
                "a flow of %d levels needs a dimension divisible by %d, got %d" % (self.n_levels, 2**self.n_levels, dim)
            )
        size = 8 * self.weight_count(dim)
        if size > FLOW_BYTES:
            raise FlowError(
                "a flow of %s on dimension %d would hold %d bytes of weights, more than %d"
                % (self, dim, size, FLOW_BYTES)
            )

    def weight_count(self, dim):
        """The number of float64 weights of a flow on ``dim`` (`weight_shapes`), so that a flow
        is sized before it is built."""
        return sum(math.prod(shape) for shape in self.weight_shapes(dim))

    def weight_shapes(self, dim):
        """The shapes of a flow's weights on ``dim``, in the order of ``Flow.weights`` (what a
        flow file stores as ``weight_000``...), from the shapes its layers make (`ActNorm`,
        `InvertibleConv1x1`, `Coupling`): a file's arrays are checked against them before a
        flow is built. Keras orders a model's trainable weights, layer by layer (a layer's own
        before those of the layers it holds), before the fixed ones (the convolutions' ``P`` and
        ``sign_s``)."""
        width, trainable, fixed = self.coupling_width, [], []
        for level in range(self.n_levels):
            channels = dim >> level
            outputs = channels if self.coupling == "affine" else channels // 2
            for _ in range(self.depth):
                trainable += [(channels,), (channels,)]  # actnorm: b, logs
                if not self.permutation:  # L, U, log_s; P, sign_s
                    trainable += [(channels, channels), (channels, channels), (channels,)]
                    fixed += [(channels, channels), (channels,)]
                trainable += [(channels // 2, width), (width, width), (width, outputs), (outputs,), (outputs,)]
                trainable += [(width,)] * 4  # the coupling's two actnorms: b, logs
        return trainable + fixed


def _zero_log_det():
    """A volume-preserving step's log-determinant: a float64 tensor; a Python 0.0 would be
    traced as float32 when Keras saves a model holding the flow."""
    return tf.zeros((), tf.float64)


def _uniform(rng, bound):
    return lambda shape, dtype=None: rng.uniform(-bound, bound, shape)


def _normal(rng, scale):
    return lambda shape, dtype=None: rng.normal(0.0, scale, shape)


class ActNorm(keras.layers.Layer):
    """Glow's actnorm: ``(x + b) * exp(3 logs)`` per channel; log-determinant ``3 sum(logs)``.

    With ``initializing`` set, a call first sets ``b`` and ``logs`` so that its output has zero
    mean and unit variance per channel on that batch (Glow's data-dependent initialisation).
    """

    def __init__(self, channels, rng, **kwargs):
        super().__init__(dtype="float64", **kwargs)
        # Weights are named after the layer: saved to HDF5 inside an encoder, names must differ.
        initializer = _uniform(rng, math.sqrt(6.0 / (1 + channels)))
        self.b = self.add_weight(name=self.name + "/b", shape=(channels,), initializer=initializer)
        self.logs = self.add_weight(name=self.name + "/logs", shape=(channels,), initializer=initializer)
        self.initializing = False

    def call(self, x, inverse=False):
        if self.initializing:
            self.b.assign(-tf.reduce_mean(x, axis=0))
            spread = tf.sqrt(tf.reduce_mean(tf.square(x + self.b), axis=0))
            self.logs.assign(-tf.math.log(spread + 1e-6) / LOGSCALE)
        log_det = LOGSCALE * tf.reduce_sum(self.logs)
        if inverse:
            return x * tf.exp(-LOGSCALE * self.logs) - self.b, -log_det
        return (x + self.b) * tf.exp(LOGSCALE * self.logs), log_det


class InvertibleConv1x1(keras.layers.Layer):
    """Glow's invertible 1x1 convolution, on a 1x1 image ``x W``.

    With ``permutation`` (all of BERT-flow's configurations), ``W`` is the fixed reversal of the
    channels. Otherwise ``W = P L (U + diag(sign_s exp(log_s)))``, with ``P`` and ``sign_s``
    fixed, ``L`` unit lower and ``U`` strictly upper triangular (only those parts of the weights
    are used), started at the LU decomposition of a random rotation; log-determinant
    ``sum(log_s)``.
    """

    def __init__(self, channels, permutation, rng, **kwargs):
        super().__init__(dtype="float64", **kwargs)
        self.permutation = permutation
        if permutation:
            return
        p, lower, upper = scipy.linalg.lu(np.linalg.qr(rng.random((channels, channels)))[0])
        s = np.diag(upper)
        for name, value, trainable in (
            ("P", p, False),
            ("L", lower, True),
            ("U", np.triu(upper, 1), True),
            ("sign_s", np.sign(s), False),
            ("log_s", np.log(np.abs(s)), True),
        ):
            setattr(
                self,
                name,
                self.add_weight(
                    name=self.name + "/" + name,
                    shape=value.shape,
                    trainable=trainable,
                    initializer=lambda shape, dtype=None, value=value: value,
                ),
            )
        self.below = np.tril(np.ones((channels, channels)), -1)

    def matrix(self):
        lower = self.L * self.below + tf.eye(self.below.shape[0], dtype=tf.float64)
        upper = self.U * self.below.T + tf.linalg.diag(self.sign_s * tf.exp(self.log_s))
        return self.P @ lower @ upper

    def call(self, x, inverse=False):
        if self.permutation:
            return tf.reverse(x, [-1]), _zero_log_det()
        log_det = tf.reduce_sum(self.log_s)
        if inverse:
            return x @ tf.linalg.inv(self.matrix()), -log_det
        return x @ self.matrix(), log_det


class Coupling(keras.layers.Layer):
    """Glow's coupling: ``x1`` passes and shifts (additive) or shifts and scales (affine) ``x2``.

    ``NN(x1)``: twice (a product by N(0, 0.05) weights, actnorm, relu), then a product and bias
    started at zero, scaled by ``exp(3 logs)``, so the coupling starts as the identity.
    """

    def __init__(self, channels, affine, width, rng, **kwargs):
        super().__init__(dtype="float64", **kwargs)
        self.affine = affine
        outputs = channels if affine else channels // 2
        self.kernels = [
            self.add_weight(name="%s/kernel_%d" % (self.name, i), shape=shape, initializer=_normal(rng, 0.05))
            for i, shape in enumerate([(channels // 2, width), (width, width)])
        ]
        self.norms = [ActNorm(width, rng, name="%s_actnorm_%d" % (self.name, i)) for i in range(2)]
        self.out_kernel, self.out_bias, self.out_logs = (
            self.add_weight(name=self.name + "/" + name, shape=shape, initializer="zeros")
            for name, shape in (("out_kernel", (width, outputs)), ("out_bias", (outputs,)), ("out_logs", (outputs,)))
        )

    def network(self, x1):
        h = x1
        for kernel, norm in zip(self.kernels, self.norms, strict=True):
            h = tf.nn.relu(norm(h @ kernel)[0])
        return (h @ self.out_kernel + self.out_bias) * tf.exp(LOGSCALE * self.out_logs)

    def call(self, x, inverse=False):
        x1, x2 = tf.split(x, 2, axis=-1)
        h = self.network(x1)
        if not self.affine:
            return tf.concat([x1, x2 - h if inverse else x2 + h], axis=-1), _zero_log_det()
        shift, scale = h[:, 0::2], tf.sigmoid(h[:, 1::2] + 2.0)
        log_det = tf.reduce_sum(tf.math.log(scale), axis=-1)
        if inverse:
            return tf.concat([x1, x2 / scale - shift], axis=-1), -log_det
        return tf.concat([x1, (x2 + shift) * scale], axis=-1), log_det


class Flow(keras.Model):
    """The flow: ``n_levels`` levels of ``depth`` steps (actnorm, 1x1 convolution, coupling),
    half of the channels split off after each level but the last.

    Args:
        dim: the vector dimension, a multiple of ``2 ** n_levels``.
        config: a `FlowConfig` (or what `FlowConfig.of` takes).
        rng: a numpy Generator for the initial values (seed 0 when None).
    """

    def __init__(self, dim, config=None, rng=None, **kwargs):
        super().__init__(dtype="float64", **kwargs)
        self.config = config = FlowConfig.of(config)
        config.check(dim)
        self.dim = dim
        self.training_summary = {}
        # What its vectors were, as a whitening records it: checked before the flow is applied.
        self.pooling, self.model_identity, self.tokenization = None, {}, {}
        rng = np.random.default_rng(0) if rng is None else rng
        self.levels = [
            [self._step(dim >> level, rng, "level_%d_step_%d" % (level, step)) for step in range(config.depth)]
            for level in range(config.n_levels)
        ]
        self._compiled = None

    def _step(self, channels, rng, name):
        return [
            ActNorm(channels, rng, name=name + "_actnorm"),
            InvertibleConv1x1(channels, self.config.permutation, rng, name=name + "_invertible"),
            Coupling(
                channels, self.config.coupling == "affine", self.config.coupling_width, rng, name=name + "_coupling"
            ),
        ]

    def forward(self, x):
        """``(z, log|det dz/dx|)``, the log-determinant per vector (or one for all)."""
        log_det, split_off = 0.0, []
        for level, steps in enumerate(self.levels):
            for step in steps:
                for layer in step:
                    x, step_log_det = layer(x)
                    log_det += step_log_det
            if level < len(self.levels) - 1:
                x, second = tf.split(x, 2, axis=-1)
                split_off.append(second)
        return tf.concat(split_off + [x], axis=-1), log_det

    def inverse(self, z):
        """The vectors whose latents are ``z``."""
        levels = len(self.levels)
        parts = tf.split(
            z, [self.dim >> (level + 1) for level in range(levels - 1)] + [self.dim >> (levels - 1)], axis=-1
        )
        x = parts[-1]
        for level in reversed(range(levels)):
            if level < levels - 1:
                x = tf.concat([x, parts[level]], axis=-1)
            for step in reversed(self.levels[level]):
                for layer in reversed(step):
                    x, _ = layer(x, inverse=True)
        return x

    def nll(self, x):
        """Negative log-likelihood of each vector under the standard normal prior on ``z``, in
        bits per dimension (BERT-flow's objective)."""
        z, log_det = self.forward(x)
        log_prior = -0.5 * tf.reduce_sum(tf.square(z) + math.log(2 * math.pi), axis=-1)
        return -(log_prior + log_det) / (math.log(2.0) * self.dim)

    def call(self, x):
        return self.forward(x)[0]

    def initialize(self, batch):
        """Glow's data-dependent initialisation of every actnorm on ``batch``."""
        norms = [layer for layer in self.submodules if isinstance(layer, ActNorm)]
        for norm in norms:
            norm.initializing = True
        try:
            self.forward(tf.constant(batch, tf.float64))
        finally:
            for norm in norms:
                norm.initializing = False

    def transform(self, vectors, batch_size=8192):
        """The latents of ``vectors``, the flow's sentence vectors: ``(n, dim)`` float64."""
        vectors, batch_size = _checked_vectors(vectors, self.dim), positive_int(batch_size, "batch_size")
        if self._compiled is None:
            self._compiled = graph_function(self.call, [tf.TensorSpec([None, self.dim], tf.float64)])
        latents = np.zeros_like(vectors)
        for start in range(0, len(vectors), batch_size):
            latents[start : start + batch_size] = self._compiled(vectors[start : start + batch_size]).numpy()
        return latents

    def save(self, path):
        """One ``.npz``: the configuration and training summary as JSON, and the weights in
        order; written to a temporary file first, so a failure leaves no file."""
        write_stream_atomically(path, self.write)

    def write(self, stream):
        """Write the ``.npz`` to a binary stream (see `save` for a file)."""
        meta = {
            "format_version": FORMAT_VERSION,
            "dim": self.dim,
            "config": dataclasses.asdict(self.config),
            "training": dict(self.training_summary),
            "pooling": self.pooling,
            "model_identity": dict(self.model_identity),
            "tokenization": dict(self.tokenization),
        }
        arrays = {"weight_%03d" % i: weight.numpy() for i, weight in enumerate(self.weights)}
        if not all(np.isfinite(array).all() for array in arrays.values()):
            raise FlowError("the flow's weights hold NaN or inf (its training diverged): not written")
        np.savez(stream, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path, hidden_size=None):
        """A flow written by `save`; anything else is a `FlowError` naming the file. Its metadata
        is checked first, its shape bounded (`FlowConfig.check`), then every weight's name and
        header checked against the shapes that shape gives (`FlowConfig.weight_shapes`) and the
        weights read, all before the flow is built: building one is most of the work of a load,
        and a file that holds no weights or the wrong ones is refused without it, as is one of
        another dimension than ``hidden_size`` (the model's it is for, when known)."""
        with NpzMembers(path, FlowError, "flow file") as members:
            stored = members.array("meta", (), kinds="U", limit=JSON_BYTES)
            where = "%s: not a readable flow file: its metadata" % path
            meta = parse_record(str(stored), METADATA, where, FlowError)
            version, dim, config = meta["format_version"], meta["dim"], meta["config"]
            if version != FORMAT_VERSION:
                raise FlowError("%s: format version %r, this version reads %d" % (path, version, FORMAT_VERSION))
            if hidden_size is not None and dim != hidden_size:  # before the flow is built: most of a load's work
                raise FlowError(
                    "%s: the flow has dimension %r but the model's hidden size is %d: it was fitted on another model"
                    % (path, dim, hidden_size)
                )
            try:
                config = FlowConfig.of(config)
                config.check(dim)
                training = checked_training_summary(meta.get("training", {}))
            except FlowError as error:
                raise FlowError("%s: %s" % (path, error)) from None
            pooling, model_identity = meta.get("pooling"), meta.get("model_identity") or {}
            if pooling is not None:
                check_recorded(pooling, RECORDED_POOLINGS, FlowError, "%s: its pooling" % path)
            tokenization = checked_tokenization(meta.get("tokenization", {}), FlowError, "%s: its tokenization" % path)
            shapes = config.weight_shapes(dim)
            names = ["weight_%03d" % i for i in range(len(shapes))]
            members.expect(names + ["meta"])
            weights = [members.array(name, shape) for name, shape in zip(names, shapes, strict=True)]
        if not all(np.isfinite(weight).all() for weight in weights):
            raise FlowError("%s: weights with NaN or inf" % path)
        return _rebuilt((dim, config, weights, training), pooling, model_identity, tokenization)

    def __reduce__(self):
        # Pickled as numpy (Beam ships the encoder's configuration to its workers).
        state = (self.dim, dataclasses.asdict(self.config), self.get_weights(), self.training_summary)
        return _rebuilt, (state, self.pooling, self.model_identity, self.tokenization)


def _rebuilt(state, pooling, model_identity, tokenization):
    """The flow of ``state`` ``(dim, config, weights, training summary)`` and what its vectors
    were: what a load and an unpickling both build."""
    dim, config, weights, training_summary = state
    flow = Flow(dim, config)
    flow.set_weights(weights)
    flow.training_summary, flow.pooling, flow.model_identity = training_summary, pooling, model_identity
    flow.tokenization = tokenization
    return flow


def _first_and_last(losses, most=10):
    """The mean loss of the first and of the last steps, ``most`` each, fewer in a short run so
    that they do not overlap (of 6 steps, the first 10 and the last 10 were the same 6: an
    untrained-looking ``NLL 1.2685 -> 1.2685``)."""
    count = max(1, min(most, len(losses) // 2))
    return float(np.mean(losses[:count])), float(np.mean(losses[-count:]))


def _checked_vectors(vectors, dim=None):
    """``vectors`` as float64, refused as `bert_whitening.whitening.WhiteningStats.update`
    refuses them (`vector_array`: real numbers, not strings numpy would parse or bools; of
    ``dim`` columns when given; `check_vectors`: finite, the first bad row named)."""
    vectors = vector_array(vectors, "vectors", FlowError, dim, "the flow's is")
    return check_vectors(vectors.astype(np.float64), "vectors", normalized=False)


#: What `fit_flow` records of its training (``Flow.training_summary``), each entry's JSON types: a
#: flow file's summary is this, or empty (a flow saved untrained); records and evaluations show
#: and compare it.
TRAINING_SUMMARY = {
    "seed": (int,),
    "vectors": (int,),
    "epochs": (int, float),
    "batch_size": (int,),
    "learning_rate": (float,),
    "steps": (int,),
    "seconds": (float,),
    "nll_first_steps": (float,),
    "nll_last_steps": (float,),
}


def checked_training_summary(summary):
    """``summary`` when it is what `fit_flow` records (`TRAINING_SUMMARY`) or empty; anything
    else is a `FlowError` naming the entry at fault."""
    if not isinstance(summary, dict):
        raise FlowError(
            "training is %s %s, expected the summary fit_flow writes (or {})" % (type(summary).__name__, shown(summary))
        )
    if not summary:
        return {}
    missing = [key for key in TRAINING_SUMMARY if key not in summary]
    if missing:
        raise FlowError("training lacks %s, which fit_flow writes" % first_few(missing))
    unexpected = sorted(shown(key) for key in summary if key not in TRAINING_SUMMARY)
    if unexpected:
        raise FlowError("training holds %s, which fit_flow never writes" % first_few(unexpected))
    for key, kinds in TRAINING_SUMMARY.items():
        value = summary[key]
        if type(value) not in kinds:
            expected = " or ".join(kind.__name__ for kind in kinds)
            raise FlowError("training %s is %s %s, expected %s" % (key, type(value).__name__, shown(value), expected))
    return dict(summary)


def _train_step(flow, learning_rate):
    """One AdamWeightDecay step of ``optimization_bert_flow.py`` on a batch; returns its loss.

    The update runs once over every variable flattened into one vector (the same elementwise
    formula): per variable it would be a dozen ops to trace, a large part of a small fit's time."""
    variables = flow.trainable_variables
    sizes = [int(np.prod(variable.shape)) for variable in variables]
    mean, square = (tf.Variable(tf.zeros([sum(sizes)], tf.float64), trainable=False) for _ in range(2))

    def step(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(flow.nll(batch))
        gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), CLIP_NORM)
        gradient = tf.concat([tf.reshape(g, [-1]) for g in gradients], 0)
        value = tf.concat([tf.reshape(v, [-1]) for v in variables], 0)
        mean.assign(BETA_1 * mean + (1 - BETA_1) * gradient)
        square.assign(BETA_2 * square + (1 - BETA_2) * tf.square(gradient))
        update = learning_rate * (mean / (tf.sqrt(square) + EPSILON) + WEIGHT_DECAY * value)
        for variable, part in zip(variables, tf.split(update, sizes), strict=True):
            variable.assign_sub(tf.reshape(part, variable.shape))
        return loss

    return graph_function(step, [tf.TensorSpec([None, flow.dim], tf.float64)])


#: Most passes over the vectors a flow trains for (BERT-flow makes one).
MAX_EPOCHS = 10_000
#: The defaults of `fit_flow`'s options, BERT-flow's.
FLOW_DEFAULTS = {"config": None, "seed": 0, "epochs": 1.0, "batch_size": 64, "learning_rate": 1e-3, "progress": None}


def check_flow_options(options, batch_name="batch_size"):
    """`fit_flow`'s options (all of `FLOW_DEFAULTS`, the missing ones filled in) checked before
    a model is built or a vector encoded: an unknown name or a refused value is one `FlowError`
    naming it. ``batch_name`` is what the caller calls the flow's batch size."""
    unknown = sorted(set(options) - set(FLOW_DEFAULTS))
    if unknown:
        names = [batch_name if name == "batch_size" else name for name in FLOW_DEFAULTS]
        close = difflib.get_close_matches(str(unknown[0]), names, 1)
        raise FlowError(
            "unknown flow option %s%s" % (shown(unknown[0]), " (did you mean %s?)" % close[0] if close else "")
        )
    checked = dict(FLOW_DEFAULTS, **options)
    checked["config"] = FlowConfig.of(checked["config"])
    seed = number(checked["seed"], "seed", FlowError, whole=True)
    if seed < 0:
        raise FlowError("seed must be a whole number >= 0, got %s" % shown(seed))
    checked["seed"] = int(seed)
    epochs = number(checked["epochs"], "epochs", FlowError)
    if not (math.isfinite(epochs) and 0 < epochs <= MAX_EPOCHS):
        raise FlowError("epochs must be a number above 0 and at most %d, got %s" % (MAX_EPOCHS, shown(epochs)))
    checked["epochs"] = float(epochs) if not isinstance(epochs, numbers.Integral) else int(epochs)
    batch_size = number(checked["batch_size"], batch_name, FlowError, whole=True)
    if batch_size < 1:
        raise FlowError("%s must be a positive integer, got %s" % (batch_name, shown(batch_size)))
    checked["batch_size"] = int(batch_size)
    learning_rate = number(checked["learning_rate"], "learning_rate", FlowError)
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise FlowError("learning_rate must be a finite number above 0, got %s" % shown(learning_rate))
    checked["learning_rate"] = float(learning_rate)
    return checked


def training_steps(count, epochs, batch_size, batch_name="batch_size"):
    """The steps of a flow trained on ``count`` vectors; a `FlowError` naming what would give one
    when there are none."""
    steps = int(count * epochs / batch_size)
    if steps < 1:
        raise FlowError(
            "%d vectors, %g epochs and batches of %d vectors make no training step: set %s to at most %d "
            "(or raise epochs, or give more sentences)" % (count, epochs, batch_size, batch_name, int(count * epochs))
            if count * epochs >= 1
            else "%d vectors and %g epochs make no training step: raise epochs or give more sentences" % (count, epochs)
        )
    return steps


def fit_flow(
    vectors,
    config=None,
    *,
    progress=None,
    pooling=None,
    model_identity=None,
    tokenization=None,
    **training,
) -> Flow:
    """Train a flow by maximum likelihood on ``vectors``, as BERT-flow does (module docstring).

    Args:
        vectors: ``(n, dim)`` pooled sentence vectors, enough for one step.
        config: a `FlowConfig`, a dict of its fields or of a BERT-flow config file, or None
            (``config_l3_d3_w32``).
        progress: a bar to advance, or the ``show`` of one of its own (True, False, or None: a
            bar on a terminal, log lines elsewhere), as `bert_whitening.progress.progress_of` takes it.
        pooling, model_identity, tokenization: what made the vectors, recorded in the flow (as
            a whitening records them) so that it is refused on vectors of another encoder.
        training: ``seed`` (initial values and shuffling), ``epochs`` (passes over the vectors,
            fractions allowed: ``int(n * epochs / batch_size)`` steps of ``batch_size`` vectors,
            the order reshuffled each pass), ``batch_size`` (vectors per step; BERT-flow's 32
            pairs are 64 vectors), ``learning_rate`` (constant); else `FLOW_DEFAULTS`'.

    The options are checked first (`check_flow_options`, an unknown one too); a training whose
    weights end NaN or inf (diverged) is a `FlowError`, and no flow is returned.
    """
    options = check_flow_options(dict(training, config=config))
    refuse_frozen_weights("training a flow", FlowError)
    seed, epochs, batch_size = options["seed"], options["epochs"], options["batch_size"]
    vectors = _checked_vectors(vectors)
    steps = training_steps(len(vectors), epochs, batch_size)
    rng = np.random.default_rng(seed)
    flow = Flow(vectors.shape[1], options["config"], rng)
    flow.pooling, flow.model_identity, flow.tokenization = pooling, dict(model_identity or {}), dict(tokenization or {})
    passes = math.ceil(steps * batch_size / len(vectors))
    order = np.concatenate([rng.permutation(len(vectors)) for _ in range(passes)])
    if flow.config.data_init:
        flow.initialize(vectors[order[:batch_size]])
    started = time.perf_counter()
    losses = _trained(flow, vectors, order, options, steps, progress)
    first, last = _first_and_last(losses)
    flow.training_summary = {
        "seed": seed,
        "vectors": len(vectors),
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": options["learning_rate"],
        "steps": steps,
        "seconds": round(time.perf_counter() - started, 3),
        "nll_first_steps": first,
        "nll_last_steps": last,
    }
    logger.info("flow trained on %d vectors, %d steps: NLL %.4f -> %.4f bits/dim", len(vectors), steps, first, last)
    return flow


def _trained(flow, vectors, order, options, steps, progress):
    """The losses of ``steps`` training steps of ``flow`` on the rows of ``vectors`` in ``order``,
    one batch after the other (a batch's rows gathered alone), with a progress bar: ``progress``
    when it is one, else one made (and closed) here. A flow whose weights end NaN or inf
    (diverged) is refused."""
    step = _train_step(flow, options["learning_rate"])
    batch_size = options["batch_size"]
    losses = []
    with progress_of(progress, "flow", steps, "step") as bar:
        for start in range(0, steps * batch_size, batch_size):
            losses.append(float(step(vectors[order[start : start + batch_size]])))
            bar.set_postfix(nll="%.3f" % losses[-1], refresh=False)
            bar.update(1)
    if not all(np.isfinite(weight.numpy()).all() for weight in flow.weights):
        raise FlowError(
            "the flow's training diverged: its weights hold NaN or inf after %d steps at learning_rate %g"
            % (steps, options["learning_rate"])
        )
    return losses

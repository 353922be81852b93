"""Sentence encoders built from checkpoints.

An `Encoder` is a Keras model from ``input_ids`` and ``segment_ids`` (int32, ``(batch, length)``,
padding id 0) to one vector per sentence, with the tokenizer and settings that go with it.
`with_whitening` appends the whitening Dense and the L2 normalisation to the same graph.
A configuration of the plain BERT that `bert_whitening.layers.FusedBert` computes is read
straight into one (faster to build and to run, the same vectors within float noise); any other
(NEZHA, RoFormer, another activation or key) is built and loaded by bert4keras, on its graph.
Either way the checkpoint must hold exactly the variables bert4keras' model would load.
"""

import contextlib
import dataclasses
import functools
from typing import Optional, Sequence

import numpy as np

from bert_whitening.arguments import str_list
from bert_whitening.backend import ARCHITECTURES, build_transformer_model, keras, tf
from bert_whitening.checkpoints import CheckpointError
from bert_whitening.checkpoints.architecture import check_trainable
from bert_whitening.checkpoints.architecture import fused_bert_sizes as _fused_bert_sizes
from bert_whitening.checkpoints.architecture import runs_fused as _runs_fused
from bert_whitening.config import EncoderConfig
from bert_whitening.errors import BertWhiteningError
from bert_whitening.layers import (
    FirstTokenPooling,
    FlowTransform,
    FusedBert,
    L2Normalize,
    MaskedAveragePooling,
    WhiteningDense,
)
from bert_whitening.names import DEFAULT_POOLING, MODEL_TYPES, POOLINGS
from bert_whitening.tokenization.tokenizer import Tokenizer


@dataclasses.dataclass
class Encoder:
    """A Keras sentence encoder and everything needed to feed it: the tokenizer and its
    vocabulary (token to id, as bert4keras reads it), and the `EncoderConfig` it computes
    (pooling, maxlen, case, whitening, k), whose fields it answers for."""

    model: keras.Model
    tokenizer: Tokenizer
    vocab: dict
    model_identity: dict
    config: EncoderConfig

    pooling = property(lambda self: self.config.pooling)
    maxlen = property(lambda self: self.config.maxlen)
    lowercase = property(lambda self: self.config.lowercase)
    normalize = property(lambda self: self.config.normalize)
    whitening = property(lambda self: self.config.whitening)
    n_components = property(lambda self: self.config.n_components or 0)

    @property
    def dim(self):
        """The size of the vectors the model outputs."""
        return self.model.output_shape[-1]

    def with_maxlen(self, maxlen):
        """The same model fed sentences cut to another ``maxlen`` (the graph has no fixed length)."""
        return dataclasses.replace(self, config=dataclasses.replace(self.config, maxlen=maxlen))


def build(configs, *, trainable: bool = False):
    """The one function that builds Keras encoders: the `Encoder` an `EncoderConfig` describes
    (pooled, then whitened or flowed and normalised as it says), or a list of them for a list
    of configurations of one model (same model, type, maxlen and case), all on one transformer
    graph loaded once: `bert_whitening.encoding.encode_together` then runs one forward pass for
    all of them, so comparing poolings costs one encoding, not one each.

    Each configuration is checked first (`EncoderConfig.check`: options, whitening or flow
    against the model) before any weights are read. ``trainable`` builds the transformer with
    trainable weights, for `bert_whitening.training`: only a model `FusedBert` computes (a plain
    BERT) can be trained, any other is refused. The pooler is built (and its weights needed)
    only when a configuration pools with it.

    Raises:
        CheckpointError: the directory or its files cannot be used (named in the message).
        BertWhiteningError: an option does not fit the model.
    """
    single = isinstance(configs, EncoderConfig)
    configs = [configs] if single else list(configs)
    if not configs:
        raise BertWhiteningError("no encoder to build: give at least one EncoderConfig")
    first = configs[0]
    for config in configs:
        differ = [key for key in _SHARED_FIELDS if getattr(config, key) != getattr(first, key)]
        if differ:
            raise BertWhiteningError("encoders built together share one model; these differ in %s" % ", ".join(differ))
        config.check()
    poolings = list(dict.fromkeys(config.pooling for config in configs))
    pooled = _pooled_encoders(first, poolings, trainable)
    encoders = [finish(pooled[config.pooling], config) for config in configs]
    return encoders[0] if single else encoders


#: What the encoders of one `build` call share: the transformer and its tokenizer.
_SHARED_FIELDS = ("model", "model_type", "maxlen", "lowercase")


def finish(pooled: Encoder, config: EncoderConfig) -> Encoder:
    """``pooled`` (an unwhitened `Encoder` of ``config``'s model and pooling, from `build`)
    followed by what ``config`` adds: its whitening (k resolved, and the whitening or flow checked
    against the model, by ``config.components``) or flow, and the normalisation. Lets a pooled
    encoder be built once and whitened after a fit."""
    k = config.components
    model = pooled.model
    if config.whitening is not None or config.flow is not None or config.normalize:
        vectors = model.output
        if k:
            vectors = WhiteningDense.from_whitening(config.whitening, k, name="whitening")(vectors)
        if config.flow is not None:
            vectors = FlowTransform.from_flow(config.flow, name="flow")(vectors)
        if config.normalize:
            vectors = L2Normalize(name="normalize")(vectors)
        model = keras.Model(model.inputs, vectors, name="whitened_encoder")
    return dataclasses.replace(
        pooled,
        model=model,
        config=dataclasses.replace(config, whitening=config.whitening if k else None, n_components=k or None),
    )


def build_encoder(
    model: Optional[str] = None,
    model_type: str = "bert",
    pooling: str = DEFAULT_POOLING,
    maxlen: int = 64,
    lowercase: bool = True,
) -> Encoder:
    """A pooled sentence `Encoder` of a model directory: `build` of the `EncoderConfig` of these
    arguments (its fields say what each is)."""
    return build(EncoderConfig(model, model_type, pooling, maxlen, lowercase))


def build_encoders(
    model: Optional[str] = None,
    model_type: str = "bert",
    poolings: Sequence[str] = (DEFAULT_POOLING,),
    maxlen: int = 64,
    lowercase: bool = True,
) -> dict[str, Encoder]:
    """``{pooling: Encoder}`` of one model loaded once: `build` of one `EncoderConfig` a pooling."""
    poolings = str_list(poolings, "poolings", "pooling names (str)", one="pooling")
    if not poolings:
        raise BertWhiteningError("poolings is empty: give at least one of %s" % ", ".join(POOLINGS))
    configs = [EncoderConfig(model, model_type, pooling, maxlen, lowercase) for pooling in poolings]
    return dict(zip(poolings, build(configs), strict=True))


def _pooled_encoders(config, poolings, trainable):
    """``{pooling: Encoder}``, unwhitened, of ``config``'s model (checked) on one transformer."""
    model_type, files = config.model_type.lower(), config.files
    described = "a %s model with %s pooling" % (model_type, " and ".join(poolings))
    inputs, first, last, pooler = load_transformer(files, model_type, "pooler" in poolings, described, trainable)
    pre_tokenize = _jieba_words if MODEL_TYPES[model_type].word_level else None
    tokenizer = Tokenizer(files.vocab, do_lower_case=config.lowercase, pre_tokenize=pre_tokenize)
    return {
        pooling: Encoder(
            model=keras.Model(inputs, _pooled(inputs[0], first, last, pooler, pooling), name="encoder"),
            tokenizer=tokenizer,
            vocab=files.vocab,
            model_identity=config.identity,
            config=EncoderConfig(config.model, model_type, pooling, config.maxlen, config.lowercase, model_files=files),
        )
        for pooling in poolings
    }


def load_transformer(files, model_type, with_pooler, described, trainable=False):
    """``(inputs, first block, last block, pooler or None)`` of the transformer of the model
    ``files`` as ``model_type``, its weights loaded once they are known to fit its configuration:
    no size larger than the weights hold (`ModelFiles.check_sizes`, before a layer is built),
    weights that fit in memory (`ModelFiles.check_load_memory`), then exactly the variables the
    transformer loads, of their shapes (`ModelFiles.check_variables`); refusals call the model
    ``described`` ("a bert model with cls pooling"). A plain BERT is a `FusedBert`, its weights
    ``trainable`` or not; any other model is bert4keras' graph, which cannot be trained. Every
    encoder is built on it, and ``convert-hf`` checks what it converts with it
    (`bert_whitening.checkpoints.huggingface`)."""
    if check_loadable(files, model_type):
        return _fused_bert(files, with_pooler, described, trainable)
    if trainable:
        check_trainable(files, model_type)
    return _bert4keras_bert(files, MODEL_TYPES[model_type].architecture, with_pooler, described)


def check_loadable(files, model_type):
    """Refuse the model ``files`` as ``model_type`` before a layer is built or a weight read, as
    `load_transformer` does first: no size larger than the weights hold, weights that fit in
    memory as it would load them. Returns whether it would build a `FusedBert` (which reads a
    weight at a time)."""
    family = MODEL_TYPES[model_type]
    files.check_sizes(family.absolute_positions)
    fused = _runs_fused(family, files.config)
    files.check_load_memory(one_at_a_time=fused)
    return fused


def _pooled(input_ids, first, last, pooler, pooling):
    """``pooling`` of the first and last transformer blocks' outputs (or the pooler's output),
    on the model's own graph: poolings of one model share its forward pass."""
    if pooling == "pooler":
        return pooler
    if pooling == "first-last-avg":
        return MaskedAveragePooling(name=pooling)([first, last], padding_mask=input_ids)
    if pooling == "last-avg":
        return MaskedAveragePooling(name=pooling)(last, padding_mask=input_ids)
    return FirstTokenPooling(name=pooling)(last)


def _fused_bert(files, pooler, described, trainable=False):
    """``(inputs, first block, last block, pooler or None)`` of a `FusedBert` of ``files``,
    its checkpoint checked against the variables it needs (as bert4keras' BERT would load them)
    and read straight into it, a weight at a time: each is read from the checkpoint when it is
    assigned, so that loading holds the model's variables and one weight more, not a second copy
    of every weight (`ModelFiles.check_load_memory`); its weights ``trainable`` or not."""
    bert = FusedBert(**_fused_bert_sizes(files.config), pooler=pooler, trainable=trainable, name="bert")
    inputs = [keras.Input((None,), dtype="int32", name=name) for name in ("Input-Token", "Input-Segment")]
    outputs = bert(inputs)
    names = _checkpoint_names(bert.blocks, pooler)
    needed = _fused_needed_variables(bert, names)
    files.check_variables(needed, described)
    with _checkpoint_errors(files):
        for weight, parts in zip(bert.weights, names, strict=True):
            weight.assign(np.concatenate([files.variables[name] for name in parts], axis=-1))
    return inputs, outputs[0], outputs[1], outputs[2] if pooler else None


def _fused_needed_variables(bert, names):
    """Checkpoint variable name -> shape of every weight of the built `FusedBert` ``bert``
    (``names`` from `_checkpoint_names`): the parts of a concatenated weight split its last axis."""
    needed = {}
    for weight, parts in zip(bert.weights, names, strict=True):
        shape = tuple(weight.shape)
        needed.update((name, shape[:-1] + (shape[-1] // len(parts),)) for name in parts)
    return needed


def _checkpoint_names(blocks, pooler):
    """google-research/bert names of a `FusedBert`'s weights, in its order, each a tuple: a weight
    of several names is their concatenation on the last axis (the query, key and value)."""

    def dense(path):
        return [(path + "/kernel",), (path + "/bias",)]

    def norm(path):
        return [(path + "/LayerNorm/gamma",), (path + "/LayerNorm/beta",)]

    names = [("bert/embeddings/%s_embeddings" % part,) for part in ("word", "token_type", "position")]
    names += norm("bert/embeddings")
    for i in range(blocks):
        layer = "bert/encoder/layer_%d/" % i
        projections = [layer + "attention/self/" + part for part in ("query", "key", "value")]
        names += [tuple(path + "/kernel" for path in projections), tuple(path + "/bias" for path in projections)]
        names += dense(layer + "attention/output/dense") + norm(layer + "attention/output")
        names += dense(layer + "intermediate/dense") + dense(layer + "output/dense") + norm(layer + "output")
    if pooler:
        names += dense("bert/pooler/dense")
    return names


def checkpoint_variables(encoder, files):
    """``{google-research/bert name: array}`` of a `FusedBert` encoder's weights as they are now
    (the fused query, key and value split back into three), with the base model ``files``'
    pooler where the encoder has none: what `bert_whitening.training` writes, so that the
    fine-tuned directory loads with any pooling, as its base did. Arrays are copied, unchanged."""
    (bert,) = [layer for layer in encoder.model.layers if isinstance(layer, FusedBert)]
    variables = {}
    for weight, parts in zip(bert.weights, _checkpoint_names(bert.blocks, bert.pooler), strict=True):
        variables.update(zip(parts, np.split(weight.numpy(), len(parts), axis=-1), strict=True))
    if not bert.pooler:
        pooler = sorted(name for name in files.variable_shapes if name.startswith("bert/pooler/"))
        with _checkpoint_errors(files):
            variables.update((name, files.variables[name]) for name in pooler)
    return variables


def _bert4keras_bert(files, architecture, pooler, described):
    """``(inputs, first block, last block, pooler or None)`` of bert4keras' model of ``files``,
    built, checked and loaded by bert4keras, on its own graph: calling its model on new inputs
    would build the whole transformer graph a second time, at a cost of its own at load."""
    transformer = build_transformer_model(
        None,
        None,
        model=_read_from_checkpoint(architecture),
        with_pool="linear" if pooler else False,
        return_keras_model=False,
        **files.config,
    )
    needed = _needed_variables(transformer)
    files.check_variables(needed, described)
    with _checkpoint_errors(files):
        # bert4keras reads every value before it assigns any
        transformer.load_weights_from_checkpoint({name: files.variables[name] for name in needed})
    bert = transformer.model
    blocks = _block_outputs(bert)
    return bert.inputs, blocks[0], blocks[-1], bert.get_layer("Pooler-Dense").output if pooler else None


@contextlib.contextmanager
def _checkpoint_errors(files):
    """TensorFlow's errors on reading a damaged checkpoint as a `CheckpointError` naming it."""
    try:
        yield
    except (tf.errors.OpError, IndexError) as error:
        if isinstance(error, IndexError) and "Read less bytes" not in str(error):
            raise  # not the checkpoint reader's word for a truncated file: a bug
        message = (
            error.message.splitlines()[0]
            if isinstance(error, tf.errors.OpError)
            else "the checkpoint data is truncated (%s)" % error
        )
        raise CheckpointError("%s: %s" % (files.weights_path, files.opened.named(message))) from None


def with_whitening(encoder: Encoder, whitening=None, n_components: Optional[int] = None) -> Encoder:
    """The same encoder followed by the whitening Dense (unless ``k`` is 0) and the L2
    normalisation (`finish` builds any other ending an `EncoderConfig` describes).

    The whitening must come from vectors of this encoder's size and pooling; anything else is
    refused before a model is built. Without a whitening only the normalisation is added.

    Args:
        encoder: from `build_encoder`.
        whitening: a fitted `bert_whitening.whitening.Whitening`, or None.
        n_components: 0 = no whitening, negative = all (the rank-many supported directions),
            ``k`` = keep ``k``; None = the default stored in the whitening.
    """
    return finish(
        encoder, dataclasses.replace(encoder.config, whitening=whitening, n_components=n_components, normalize=True)
    )


@functools.lru_cache(maxsize=None)
def _read_from_checkpoint(architecture):
    """bert4keras' class of ``architecture`` with its weights created as zeros, not drawn from a
    truncated normal: `check_variables` has made sure the checkpoint holds every one of them, so
    the draw would be overwritten (a large part of the build's time)."""
    base = ARCHITECTURES[architecture]
    return type(base.__name__, (base,), {"initializer": property(lambda self: keras.initializers.Zeros())})


def _needed_variables(transformer):
    """Checkpoint variable name -> shape of every weight the bert4keras ``transformer`` (built,
    not loaded) loads: its ``variable_mapping`` for the layers it has, as its loader pairs them."""
    return {
        name: tuple(weight.shape)
        for layer, names in transformer.variable_mapping().items()
        if layer in transformer.layers
        for weight, name in zip(transformer.layers[layer].trainable_weights, names, strict=True)
    }


def _block_outputs(bert):
    """Outputs of ``Transformer-0-FeedForward-Norm``, ``Transformer-1-...``, in order."""
    names = {layer.name for layer in bert.layers}
    count = 0
    while "Transformer-%d-FeedForward-Norm" % count in names:
        count += 1
    return [bert.get_layer("Transformer-%d-FeedForward-Norm" % i).output for i in range(count)]


def _jieba_words(text):
    import jieba

    return jieba.lcut(text, HMM=False)

"""Sentence encoders built from checkpoints with bert4keras' own loader.

An `Encoder` is a Keras model from ``input_ids`` and ``segment_ids`` (int32, ``(batch, length)``,
padding id 0) to one vector per sentence, with the tokenizer and settings that go with it.
`with_whitening` appends the whitening Dense and the L2 normalisation to the same graph.
bert4keras builds the model and loads its weights; when that model is the plain BERT that
`bert_whitening.layers.FusedBert` computes, the encoder runs a `FusedBert` holding its weights
(faster, the same vectors within float noise), else bert4keras' graph itself.
"""

import dataclasses
import functools
import logging
from typing import Optional, Sequence

from bert_whitening.backend import (
    ARCHITECTURES,
    LayerNormalization,
    Tokenizer,
    build_transformer_model,
    gelu_erf,
    keras,
    load_vocab,
    tf,
)
from bert_whitening.checkpoints import CheckpointError
from bert_whitening.config import EncoderConfig, check_fitted_on, check_model, whitening_components
from bert_whitening.encoding import may_run_bfloat16
from bert_whitening.errors import BertWhiteningError, WhiteningError
from bert_whitening.layers import (
    FirstTokenPooling,
    FlowTransform,
    FusedBert,
    L2Normalize,
    MaskedAveragePooling,
    WhiteningDense,
)
from bert_whitening.layers.fused_bert import LAYER_NORM_EPSILON
from bert_whitening.names import MODEL_TYPES, POOLINGS, check_choice

logger = logging.getLogger(__name__)


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


def build_encoder(
    model: Optional[str] = None,
    model_type: str = "bert",
    pooling: str = "first-last-avg",
    maxlen: int = 64,
    lowercase: bool = True,
) -> Encoder:
    """Load a model directory into a pooled sentence `Encoder`, with bert4keras' own loader.

    Args:
        model: a Google-format or Hugging Face BERT directory; None or ``minilm`` for the
            built-in all-MiniLM-L6-v2.
        model_type: the family (`bert_whitening.names.MODEL_TYPES`): bert, roberta, nezha,
            wobert, roformer, simbert.
        pooling: ``first-last-avg``, ``last-avg``, ``cls`` or ``pooler`` (linear, as the
            original builds it).
        maxlen: tokens per sentence with ``[CLS]`` and ``[SEP]``; at most the model's
            ``max_position_embeddings`` for families with a position table.
        lowercase: lower-case and strip accents before wordpiece (uncased and Chinese models).

    Raises:
        CheckpointError: the directory or its files cannot be used (named in the message).
        BertWhiteningError: an option does not fit the model.
    """
    return build_encoders(model, model_type, (pooling,), maxlen, lowercase)[pooling]


def build_encoders(
    model: Optional[str] = None,
    model_type: str = "bert",
    poolings: Sequence[str] = ("first-last-avg",),
    maxlen: int = 64,
    lowercase: bool = True,
) -> dict[str, Encoder]:
    """``{pooling: Encoder}`` of one model loaded once, each as `build_encoder` makes it, all on
    the same transformer graph: `bert_whitening.encoding.encode_together` runs one forward pass
    for all of them, so comparing poolings costs one encoding, not one each. Arguments as
    `build_encoder`'s; the pooler is built (and its weights needed) only when ``poolings`` has
    ``pooler``."""
    model_type = model_type.lower()
    if not poolings:
        raise BertWhiteningError("poolings is empty: give at least one of %s" % ", ".join(POOLINGS))
    for pooling in poolings:
        check_choice("pooling", pooling, POOLINGS)
    files = check_model(model, model_type, poolings[0], maxlen)
    family = MODEL_TYPES[model_type]
    transformer = build_transformer_model(
        None,
        None,
        model=_read_from_checkpoint(family.architecture),
        with_pool="linear" if "pooler" in poolings else False,
        return_keras_model=False,
        **files.config,
    )
    files.check_variables(
        _needed_variables(transformer), "a %s model with %s pooling" % (model_type, " and ".join(poolings))
    )
    try:
        transformer.load_weights_from_checkpoint(files.weights)
    except (tf.errors.OpError, IndexError) as error:
        if isinstance(error, IndexError) and "Read less bytes" not in str(error):
            raise  # not the checkpoint reader's word for a truncated file: a bug
        message = (
            error.message.splitlines()[0]
            if isinstance(error, tf.errors.OpError)
            else "the checkpoint data is truncated (%s)" % error
        )
        raise CheckpointError("%s: %s" % (files.weights_path, message)) from None
    vocab = load_vocab(files.vocab_path)
    tokenizer = Tokenizer(vocab, do_lower_case=lowercase, pre_tokenize=_jieba_words if family.word_level else None)
    identity = files.identity(model_type)
    inputs, first, last, pooler = _fused(transformer) or _bert4keras_outputs(transformer.model)
    encoders = {}
    for pooling in poolings:
        config = EncoderConfig(model=model, model_type=model_type, pooling=pooling, maxlen=maxlen, lowercase=lowercase)
        encoders[pooling] = Encoder(
            model=keras.Model(inputs, _pooled(inputs[0], first, last, pooler, pooling), name="encoder"),
            tokenizer=tokenizer,
            vocab=vocab,
            model_identity=identity,
            config=config,
        )
    return encoders


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


def _bert4keras_outputs(bert):
    """``(inputs, first block, last block, pooler or None)`` of bert4keras' model ``bert``, on
    its own graph: calling its model on new inputs would build the whole transformer graph a
    second time (a third of the load time)."""
    blocks = _block_outputs(bert)
    names = {layer.name for layer in bert.layers}
    pooler = bert.get_layer("Pooler-Dense").output if "Pooler-Dense" in names else None
    return bert.inputs, blocks[0], blocks[-1], pooler


def _fused(transformer):
    """``(inputs, first block, last block, pooler or None)`` of a `FusedBert` holding the weights
    of bert4keras' loaded ``transformer``, or None unless that is the plain BERT `FusedBert`
    computes (then bert4keras' graph is used): every layer checked by name and setting; and
    not in a process that may encode in bfloat16 (`bert_whitening.encoding.may_run_bfloat16`)."""
    if may_run_bfloat16():
        # Under bfloat16's mixed precision its vectors move further from float32 than bert4keras'
        # graph's (smallest whitened cosine 0.9988 against 0.9997 on 4,000 STS-B sentences).
        return None
    bert = transformer.model
    layers = {layer.name: layer for layer in bert.layers}
    blocks = len(_block_outputs(bert))
    expected = {"Input-Token", "Input-Segment", "Embedding-Token", "Embedding-Segment", "Embedding-Token-Segment"}
    expected |= {"Embedding-Position", "Embedding-Norm", "Embedding-Dropout"}
    for i in range(blocks):
        for part in ("MultiHeadSelfAttention", "FeedForward"):
            expected |= {"Transformer-%d-%s%s" % (i, part, end) for end in ("", "-Dropout", "-Add", "-Norm")}
    pooler = "Pooler-Dense" in layers
    if pooler:
        expected |= {"Pooler", "Pooler-Dense"}
    if set(layers) != expected or not _plain_bert_layers(layers, blocks, transformer.hidden_size):
        return None
    fused = FusedBert(
        vocab_size=transformer.vocab_size,
        segment_vocab_size=transformer.segment_vocab_size,
        max_position=transformer.max_position,
        hidden=transformer.hidden_size,
        heads=transformer.num_attention_heads,
        intermediate=transformer.intermediate_size,
        blocks=blocks,
        pooler=pooler,
        name="bert",
    )
    inputs = [keras.Input((None,), dtype="int32", name=name) for name in ("Input-Token", "Input-Segment")]
    outputs = fused(inputs)
    for target, source in zip(fused.weights, _bert4keras_weights(layers, blocks, pooler), strict=True):
        target.assign(tf.concat(source, axis=-1) if isinstance(source, list) else source)
    return inputs, outputs[0], outputs[1], outputs[2] if pooler else None


def _plain_bert_layers(layers, blocks, hidden):
    """bert4keras' layers compute what `FusedBert` computes: additive absolute positions, plain
    layer norms of epsilon 1e-12, scaled softmax attention with biases, an erf-GELU feed-forward,
    a linear pooler."""
    position = layers["Embedding-Position"]
    if position.merge_mode != "add" or position.hierarchical or position.custom_position_ids:
        return False
    norms = [layer for layer in layers.values() if isinstance(layer, LayerNormalization)]
    if len(norms) != 2 * blocks + 1 or not all(
        norm.epsilon == LAYER_NORM_EPSILON and norm.scale and norm.offset and not norm.conditional for norm in norms
    ):
        return False
    for i in range(blocks):
        attention = layers["Transformer-%d-MultiHeadSelfAttention" % i]
        feed_forward = layers["Transformer-%d-FeedForward" % i]
        if (
            attention.heads * attention.head_size != hidden
            or attention.key_size != attention.head_size
            or attention.out_dim != hidden
            or not attention.use_bias
            or not attention.attention_scale
            or attention.normalization != "softmax"
            or feed_forward.activation != [gelu_erf]
            or not feed_forward.use_bias
        ):
            return False
    return "Pooler-Dense" not in layers or layers["Pooler-Dense"].activation is keras.activations.linear


def _bert4keras_weights(layers, blocks, pooler):
    """bert4keras' weights in the order `FusedBert` creates its own (a list: to be concatenated)."""

    def norm(name):
        return [layers[name].gamma, layers[name].beta]

    weights = [layers[name].embeddings for name in ("Embedding-Token", "Embedding-Segment", "Embedding-Position")]
    weights += norm("Embedding-Norm")
    for i in range(blocks):
        attention = layers["Transformer-%d-MultiHeadSelfAttention" % i]
        feed_forward = layers["Transformer-%d-FeedForward" % i]
        projections = (attention.q_dense, attention.k_dense, attention.v_dense)
        weights += [[dense.kernel for dense in projections], [dense.bias for dense in projections]]
        weights += [attention.o_dense.kernel, attention.o_dense.bias]
        weights += norm("Transformer-%d-MultiHeadSelfAttention-Norm" % i)
        weights += [feed_forward.i0_dense.kernel, feed_forward.i0_dense.bias]
        weights += [feed_forward.o_dense.kernel, feed_forward.o_dense.bias]
        weights += norm("Transformer-%d-FeedForward-Norm" % i)
    if pooler:
        weights += [layers["Pooler-Dense"].kernel, layers["Pooler-Dense"].bias]
    return weights


def _warn_if_fitted_on_another_model(whitening, identity):
    fitted_on = whitening.model_identity or {}
    differs = [
        key for key in ("name", "vocab_sha256") if fitted_on.get(key) and fitted_on.get(key) != identity.get(key)
    ]
    if differs:
        logger.warning(
            "the whitening was fitted on another model of the same size (%s, this is "
            "%s): the %s differ, so these vectors will not be whitened as intended",
            fitted_on.get("name", "?"),
            identity.get("name", "?"),
            " and ".join("vocabulary" if key == "vocab_sha256" else key for key in differs),
        )


def with_whitening(
    encoder: Encoder,
    whitening=None,
    n_components: Optional[int] = None,
    normalize: bool = True,
    allow_rank_deficient: bool = False,
    flow=None,
) -> Encoder:
    """The same encoder followed by the whitening Dense (unless ``k`` is 0), or by a trained
    flow in its place, and the L2 normalisation.

    The whitening must come from vectors of this encoder's size and pooling; anything else is
    refused before a model is built. Without a whitening only the normalisation is added.

    Args:
        encoder: from `build_encoder`.
        whitening: a fitted `bert_whitening.whitening.Whitening`, or None.
        n_components: 0 = no whitening, negative = all (the rank-many supported directions),
            ``k`` = keep ``k``; None = the default stored in the whitening.
        normalize: append the L2 normalisation.
        allow_rank_deficient: allow a ``k`` above the rank of the covariance.
        flow: a `bert_whitening.flow.Flow` of this encoder's vectors (then no whitening).
    """
    if flow is not None and whitening is not None:
        raise WhiteningError("a flow takes the place of the whitening: give one of them, not both")
    k = 0
    if whitening is not None:
        k = whitening_components(whitening, encoder.model_identity, encoder.pooling, n_components, allow_rank_deficient)
        _warn_if_fitted_on_another_model(whitening, encoder.model_identity)
    vectors = encoder.model.output
    if k:
        vectors = WhiteningDense.from_whitening(whitening, k, name="whitening")(vectors)
    if flow is not None:
        check_fitted_on("flow", flow, encoder.model_identity, encoder.pooling)
        vectors = FlowTransform.from_flow(flow, name="flow")(vectors)
    if normalize:
        vectors = L2Normalize(name="normalize")(vectors)
    model = keras.Model(encoder.model.inputs, vectors, name="whitened_encoder")
    config = dataclasses.replace(
        encoder.config,
        whitening=whitening if k else None,
        n_components=k or None,
        normalize=normalize,
        allow_rank_deficient=allow_rank_deficient,
        flow=flow,
    )
    return dataclasses.replace(encoder, model=model, config=config)


@functools.lru_cache(maxsize=None)
def _read_from_checkpoint(architecture):
    """bert4keras' class of ``architecture`` with its weights created as zeros, not drawn from a
    truncated normal: `check_variables` has made sure the checkpoint holds every one of them, so
    the draw would be overwritten (a fifth of all-MiniLM-L6-v2's build time)."""
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

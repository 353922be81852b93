"""Sentence encoders built from checkpoints with bert4keras' own loader.

An `Encoder` is a Keras model from ``input_ids`` and ``segment_ids`` (int32, ``(batch, length)``,
padding id 0) to one vector per sentence, with the tokenizer and settings that go with it.
`with_whitening` appends the whitening Dense and the L2 normalisation to the same graph.
"""
import dataclasses

from bert_whitening.backend import Tokenizer, build_transformer_model, keras, tf
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.layers import FirstTokenPooling, L2Normalize, MaskedAveragePooling, WhiteningDense
from bert_whitening.names import MODEL_TYPES, POOLINGS, check_choice


@dataclasses.dataclass
class Encoder:
    """A Keras sentence encoder and everything needed to feed it."""

    model: keras.Model
    tokenizer: Tokenizer
    pooling: str
    maxlen: int
    hidden_size: int
    identity: dict
    lowercase: bool = True
    n_components: int = 0
    normalize: bool = False
    whitening: dict = None

    @property
    def dim(self):
        return self.n_components or self.hidden_size


@dataclasses.dataclass
class EncoderSpec:
    """How to build an encoder, whitened or not: small and picklable (Beam ships it to its
    workers), unlike the encoder. ``build`` is `build_encoder`, then `with_whitening` when there
    is a whitening or a normalisation to add."""

    model: str = None
    model_type: str = "bert"
    pooling: str = "first-last-avg"
    maxlen: int = 64
    lowercase: bool = True
    whitening: object = None  # a `Whitening`
    n_components: int = None
    normalize: bool = False
    allow_rank_deficient: bool = False

    def build(self):
        encoder = build_encoder(self.model, self.model_type, self.pooling, self.maxlen, self.lowercase)
        if self.whitening is None and not self.normalize:
            return encoder
        return with_whitening(encoder, self.whitening, self.n_components, self.normalize,
                              self.allow_rank_deficient)


def build_encoder(model=None, model_type="bert", pooling="first-last-avg", maxlen=64, lowercase=True):
    """Load a model directory (Google or Hugging Face format; None or ``minilm`` for the
    built-in all-MiniLM-L6-v2) into a pooled sentence `Encoder`."""
    model_type = model_type.lower()
    check_choice("model type", model_type, list(MODEL_TYPES))
    check_choice("pooling", pooling, POOLINGS)
    if maxlen < 2:
        raise ValueError("maxlen must leave room for [CLS] and [SEP]; got %d" % maxlen)
    files = find_model(model)
    architecture, word_level = MODEL_TYPES[model_type]
    try:
        bert = build_transformer_model(
            None, files.weights, model=architecture,
            with_pool="linear" if pooling == "pooler" else False, **files.config)
    except (tf.errors.NotFoundError, KeyError) as error:
        message = error.message.splitlines()[0] if hasattr(error, "message") else (
            "Key %s not found in the weights" % error.args[0])
        hint = " (pooler pooling needs the pooler weights)" if "pooler" in message else ""
        raise CheckpointError("%s: %s%s" % (files.directory, message, hint)) from None
    if pooling == "pooler":
        taps = [bert.get_layer("Pooler-Dense").output]
    else:
        blocks = _block_outputs(bert)
        taps = [blocks[0], blocks[-1]] if pooling == "first-last-avg" else [blocks[-1]]
    body = keras.Model(bert.inputs, taps, name="transformer")

    input_ids = keras.Input((None,), dtype="int32", name="input_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    hidden = body([input_ids, segment_ids])
    if pooling in ("first-last-avg", "last-avg"):
        pooled = MaskedAveragePooling(name="pooling")(hidden, padding_mask=input_ids)
    elif pooling == "cls":
        pooled = FirstTokenPooling(name="pooling")(hidden)
    else:
        pooled = hidden[0] if isinstance(hidden, list) else hidden
    model = keras.Model([input_ids, segment_ids], pooled, name="encoder")

    pre_tokenize = _jieba_words if word_level else None
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=lowercase, pre_tokenize=pre_tokenize)
    return Encoder(model=model, tokenizer=tokenizer, pooling=pooling, maxlen=maxlen,
                   hidden_size=files.config["hidden_size"], identity=files.identity(model_type),
                   lowercase=lowercase)


def with_whitening(encoder, whitening=None, n_components=None, normalize=True,
                   allow_rank_deficient=False):
    """The same encoder followed by the whitening Dense (unless ``k`` is 0) and L2 normalisation.

    The whitening must come from vectors of this encoder's size and pooling; anything else is
    refused before a model is built. Without a whitening only the normalisation is added.
    """
    if whitening is None:
        k = 0
    elif whitening.dim != encoder.hidden_size:
        raise ValueError("the whitening has dimension %d but the model's hidden size is %d: it "
                         "was fitted on another model (%s)"
                         % (whitening.dim, encoder.hidden_size, whitening.model.get("name", "?")))
    elif whitening.pooling and whitening.pooling != encoder.pooling:
        raise ValueError("the whitening was fitted on %s pooling, the encoder uses %s"
                         % (whitening.pooling, encoder.pooling))
    else:
        k = whitening.components(n_components, allow_rank_deficient)
    vectors = encoder.model.output
    if k:
        vectors = WhiteningDense.from_whitening(whitening, k, name="whitening")(vectors)
    if normalize:
        vectors = L2Normalize(name="normalize")(vectors)
    model = keras.Model(encoder.model.inputs, vectors, name="whitened_encoder")
    fitted = None if whitening is None else {
        "beta": whitening.beta, "gamma": whitening.gamma, "count": whitening.count,
        "rank": whitening.rank, "fitted_on_model": whitening.model}
    return dataclasses.replace(encoder, model=model, n_components=k, normalize=normalize,
                               whitening=fitted)


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

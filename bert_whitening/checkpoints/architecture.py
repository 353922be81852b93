"""What a model directory's configuration rules, read from its checked `ModelFiles` alone (no
TensorFlow, no weights): the options it allows (`check_model`, `check_options`), the graph that
runs it (`runs_fused`, `not_fused_because`: `FusedBert` for a plain BERT, bert4keras' otherwise,
and so whether it can be trained, `check_trainable`), and its sizes (`fused_bert_sizes`,
`block_bytes_per_token`), which the checks of memory before TensorFlow count with."""

from bert_whitening.arguments import integer
from bert_whitening.checkpoints import find_model
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import MODEL_TYPES, POOLINGS, check_choice


def check_model(model, model_type, pooling, maxlen):
    """The `ModelFiles` of ``model`` once the options are known to fit it; reads no weights."""
    files = find_model(model)
    check_options(files, model_type, pooling, maxlen)
    return files


def check_options(files, model_type, pooling, maxlen):
    """Refuse a model type, pooling or maxlen that the model ``files`` rule out."""
    check_choice("model type", model_type.lower(), list(MODEL_TYPES))
    check_choice("pooling", pooling, POOLINGS)
    if integer(maxlen, "maxlen") < 2:
        raise BertWhiteningError("maxlen must leave room for [CLS] and [SEP]; got %d" % maxlen)
    positions = files.config.get("max_position_embeddings")
    if MODEL_TYPES[model_type.lower()].absolute_positions and positions and maxlen > positions:
        raise BertWhiteningError(
            "maxlen %d is larger than the %d positions of %s (max_position_embeddings); choose "
            "maxlen <= %d" % (maxlen, positions, files.name, positions)
        )


#: The keys of a BERT configuration (google-research/bert's, and the pooler and directionality
#: keys of Chinese releases, which bert4keras ignores): with no other key, bert4keras' BERT is the
#: plain BERT `FusedBert` computes.
PLAIN_BERT_KEYS = frozenset(
    ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    + ("hidden_act", "max_position_embeddings", "type_vocab_size", "hidden_dropout_prob")
    + ("attention_probs_dropout_prob", "initializer_range", "directionality")
    + ("pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")
)


def runs_fused(family, config):
    """Whether bert4keras would build ``config`` as the plain BERT `FusedBert` computes
    (`not_fused_because` says why not)."""
    return not_fused_because(family, config) is None


def not_fused_because(family, config):
    """Why bert4keras would not build ``config`` as the plain BERT `FusedBert` computes, or None
    when it would: the BERT architecture, only the keys of a BERT configuration (any other, such
    as ``embedding_size`` or ``hierarchical_position``, changes what bert4keras builds), erf-GELU.
    Its sizes are a model directory's (`bert_whitening.io.bounded.check_model_sizes`: whole, the
    heads splitting the hidden size)."""
    other_keys = sorted(set(config) - PLAIN_BERT_KEYS)
    if family.architecture != "bert":
        return "the %s architecture" % family.architecture
    if other_keys:
        keys = "keys" if len(other_keys) > 1 else "key"
        return "%s %s, which a BERT configuration does not have" % (keys, ", ".join(map(repr, other_keys)))
    if config.get("hidden_act") not in ("gelu", "gelu_erf"):
        return "hidden_act %r, not gelu" % (config.get("hidden_act"),)
    return None


def check_trainable(files, model_type, error=BertWhiteningError):
    """Refuse, as ``error``, to train a model `FusedBert` does not compute (only it has a training
    step), saying what in its configuration (`ModelFiles`) makes it so."""
    unplain = not_fused_because(MODEL_TYPES[model_type.lower()], files.config)
    if unplain:
        raise error(
            "%s: only a plain BERT can be trained, and this %s configuration has %s (it runs on "
            "bert4keras' graph, not FusedBert)" % (files.config_path, model_type, unplain)
        )


def fused_bert_sizes(config):
    """`FusedBert`'s sizes from a BERT configuration, with bert4keras' defaults (2 segments, 512
    positions); None where the configuration lacks one."""
    return {
        "vocab_size": config.get("vocab_size"),
        "segment_vocab_size": config.get("type_vocab_size", 2),
        "max_position": config.get("max_position_embeddings", 512),
        "hidden": config.get("hidden_size"),
        "heads": config.get("num_attention_heads"),
        "intermediate": config.get("intermediate_size"),
        "blocks": config.get("num_hidden_layers"),
    }


def block_bytes_per_token(config, maxlen):
    """Bytes per token of the largest tensors a transformer block of the BERT ``config`` holds at
    once, float32, at ``maxlen`` tokens a sentence: the feed-forward's inner layer with the
    residual stream (three hidden-wide tensors), and the attention scores (a row of ``maxlen``
    per head)."""
    sizes = fused_bert_sizes(config)
    hidden, inner, heads = sizes["hidden"], sizes["intermediate"], sizes["heads"]  # required (check_model_sizes)
    return 4 * (inner + 3 * hidden + heads * maxlen)

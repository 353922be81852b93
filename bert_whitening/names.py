"""Names shared by the command line and the model builder, importable without TensorFlow."""

from typing import NamedTuple


class ModelType(NamedTuple):
    """How bert4keras builds a family of the original eval.py."""

    architecture: str  #: bert4keras' class, a key of `bert_whitening.backend.ARCHITECTURES`
    word_level: bool  #: jieba splits words before wordpiece (word-level vocabularies)
    absolute_positions: bool  #: has a position embedding table, which bounds the sequence length


#: Model families of the original eval.py. NEZHA's positions are relative and RoFormer's rotary,
#: so neither has a table that limits ``maxlen``.
MODEL_TYPES = {
    "bert": ModelType("bert", False, True),
    "roberta": ModelType("bert", False, True),
    "nezha": ModelType("nezha", False, False),
    "wobert": ModelType("bert", True, True),
    "roformer": ModelType("roformer", True, False),
    "simbert": ModelType("bert", False, True),
}

#: The original's pooling names. ``pooler`` is the pooler Dense with a *linear* activation, as
#: the original get_encoder builds it (bert4keras ``with_pool='linear'``), not BERT's tanh pooler.
POOLINGS = ("first-last-avg", "last-avg", "cls", "pooler")
#: The pooling of every command and function that is given none (and no whitening or flow that
#: records one): the original's choice for its Chinese results.
DEFAULT_POOLING = "first-last-avg"
#: What a whitening or flow file may record as the pooling of the vectors it was fitted on: one
#: of `POOLINGS`, or "" for vectors of no encoder (say `bert_whitening.whitening.fit_whitening` on
#: an array); anything else is a crafted file, refused when it is loaded.
RECORDED_POOLINGS = ("",) + POOLINGS


def check_recorded(value, allowed, error, what):
    """Refuse a value a file records (``what``: the file and field, as the message begins) unless
    it is one of ``allowed``: one line, ``error`` its class, for a whitening's or a flow's fields."""
    if value not in allowed:
        raise error("%s is %r, expected one of %s" % (what, value, ", ".join(map(repr, allowed))))


def checked_tokenization(value, error, what):
    """A tokenization a whitening or flow file records: how the text of the vectors it was fitted
    on was cut and cased, ``{"maxlen": int >= 2, "lowercase": bool}``, or ``{}`` when unknown
    (files of earlier versions, vectors given as numbers); anything else is refused in one line
    (``what``: the file and field, as the message begins)."""
    if value == {}:
        return {}
    if (
        not isinstance(value, dict)
        or set(value) != {"maxlen", "lowercase"}
        or type(value["maxlen"]) is not int
        or value["maxlen"] < 2
        or type(value["lowercase"]) is not bool
    ):
        raise error('%s is %r, expected {} or {"maxlen": an integer >= 2, "lowercase": true or false}' % (what, value))
    return dict(value)


#: What a setting other than raw fits on the vectors: a whitening, or a BERT-flow.
METHODS = ("whitening", "flow")

#: How the model's matrix products run. ``bfloat16``: matrix products in bfloat16, residual sums,
#: layer norms, softmax and the whitening in float32 (`bert_whitening.precision`); ``auto``
#: picks one of the two on the first sentences encoded.
PRECISIONS = ("auto", "float32", "bfloat16")
#: What an export's products may be traced in (`bert_whitening.export.export_saved_model`).
EXPORT_PRECISIONS = ("float32", "bfloat16")

#: CoSENT's scale of the cosines (`bert_whitening.losses.cosent`), the original's: a cosine
#: difference of 0.05 is already a factor e in a term.
COSENT_SCALE = 20.0

#: The environment variable that, when set, is ``--precision``'s default (one setting for every
#: command of a job, its Beam workers included).
PRECISION_VARIABLE = "BERT_WHITENING_PRECISION"

#: TensorFlow's promise to oneDNN that no weight changes once a product has read it: oneDNN then
#: reorders each product's weights once and keeps the copy, instead of at every call. Only with
#: it do bfloat16 products run on AMX when their weights are variables (docs/performance.md). It
#: is read once per process, at the first product, and holds for every graph of the process:
#: a weight changed later goes unseen (the product keeps its first copy). The command line sets
#: it where it may (`bert_whitening.commands.base.weights_frozen`).
FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"


def check_choice(name, value, choices):
    """Raise a `BertWhiteningError` (a ValueError) that lists the choices when ``value`` is not one of them."""
    if value not in choices:
        from bert_whitening.errors import BertWhiteningError

        raise BertWhiteningError("unknown %s %r; choose one of: %s" % (name, value, ", ".join(choices)))

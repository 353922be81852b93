"""Names shared by the command line and the model builder, importable without TensorFlow."""

#: Model families of the original eval.py: bert4keras architecture, and whether sentences are
#: split into words by jieba before wordpiece (WoBERT and RoFormer have word-level vocabularies).
MODEL_TYPES = {
    "bert": ("bert", False),
    "roberta": ("bert", False),
    "nezha": ("nezha", False),
    "wobert": ("bert", True),
    "roformer": ("roformer", True),
    "simbert": ("bert", False),
}

#: The original's pooling names. ``pooler`` is the pooler Dense with a *linear* activation, as
#: the original get_encoder builds it (bert4keras ``with_pool='linear'``), not BERT's tanh pooler.
POOLINGS = ("first-last-avg", "last-avg", "cls", "pooler")

#: How the model's matrix products run. ``bfloat16`` is oneDNN's automatic mixed precision:
#: matrix products in bfloat16, accumulations and everything else in float32 (see encoding.py).
PRECISIONS = ("float32", "bfloat16")


def check_choice(name, value, choices):
    """Raise a ValueError that lists the choices when ``value`` is not one of them."""
    if value not in choices:
        raise ValueError("unknown %s %r; choose one of: %s" % (name, value, ", ".join(choices)))

"""The command line's argument types (a value refused when parsed, naming it) and the option groups
several commands share: the model's, the whitening's, a fit's, Beam's, a flow's training."""

import argparse
import math
import os

from bert_whitening.arguments import MAX_SHARDS, MAX_VERSION
from bert_whitening.codes import CODES
from bert_whitening.data import INPUT_FORMATS
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import METHODS, MODEL_TYPES, POOLINGS, PRECISION_VARIABLE, PRECISIONS
from bert_whitening.retrieval.faiss_indexes import HNSW_M_RANGE


def _checked(kind, test, requirement):
    """An argparse type: ``kind(text)`` that passes ``test``, else a message naming the value."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not %s" % (text, requirement)) from None
        if not test(value):
            raise argparse.ArgumentTypeError("%r is not %s" % (text, requirement))
        return value

    parse.__name__ = requirement  # argparse names the type in its messages
    return parse


positive_int = _checked(int, lambda v: v > 0, "a positive integer")
positive_float = _checked(float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
non_negative_int = _checked(int, lambda v: v >= 0, "an integer >= 0")
shards_int = _checked(int, lambda v: 0 <= v <= MAX_SHARDS, "an integer 0..%d" % MAX_SHARDS)
maxlen_int = _checked(int, lambda v: v >= 2, "an integer >= 2 (room for [CLS] and [SEP])")
finite_float = _checked(float, math.isfinite, "a finite number")
int_list = _checked(lambda text: [int(part) for part in text.split(",")], bool, "a comma-separated list of integers")
#: numpy's generators take seeds >= 0 only; a negative one failed after the model had encoded.
seed_int = non_negative_int
seed_list = _checked(
    lambda text: [int(part) for part in text.split(",")],
    lambda values: values and min(values) >= 0,
    "a comma-separated list of integers >= 0",
)
#: HNSW neighbours per node: FAISS allocates M links per node per level whatever M is, so a
#: mistyped M (a count meant for another option) would take the memory of that many copies of
#: the corpus before failing or finishing; published settings stay far below this bound.
hnsw_m_int = _checked(int, lambda v: v in HNSW_M_RANGE, "an integer %d..%d" % (HNSW_M_RANGE[0], HNSW_M_RANGE[-1]))
hnsw_int = _checked(
    int, lambda v: v == 0 or v in HNSW_M_RANGE, "0 (exact) or an integer %d..%d" % (HNSW_M_RANGE[0], HNSW_M_RANGE[-1])
)
#: TF Serving reads a version directory's name as an int64.
version_int = _checked(int, lambda v: 0 <= v <= MAX_VERSION, "an integer 0..2**63-1 (TF Serving's int64 versions)")


def _choice_list(choices):
    """An argparse type: comma-separated ``choices``, each kept once, in order."""
    return _checked(
        lambda text: list(dict.fromkeys(text.split(","))),
        lambda values: set(values) <= set(choices),
        "a comma-separated list of: " + ", ".join(choices),
    )


method_list = _choice_list(METHODS)
code_list = _choice_list(CODES)
pooling_list = _choice_list(POOLINGS)
finite_float_list = _checked(
    lambda text: [float(part) for part in text.split(",")],
    lambda values: all(map(math.isfinite, values)),
    "a comma-separated list of finite numbers",
)


def model_options(parser, pooling_default, batches=True, maxlen_default=64, poolings=False, rank_deficient=True):
    """The options that say which model encodes and how: every command that loads one. ``pooling_default``
    None: the whitening file's; ``poolings``: several, scored on one encoding; ``batches``: a batch size and
    a precision (not where the model is exported or trained)."""
    parser.add_argument(
        "--model",
        metavar="DIR",
        help="model directory, Google format (bert_config.json, bert_model.ckpt.*, "
        "vocab.txt) or Hugging Face BERT (config.json, model.safetensors, "
        "vocab.txt); 'minilm' or omitted: the built-in all-MiniLM-L6-v2",
    )
    parser.add_argument(
        "--model-type",
        default="bert",
        type=str.lower,
        choices=MODEL_TYPES,
        help="model family; wobert and roformer split words with jieba first",
    )
    _pooling_option(parser, pooling_default, poolings)
    parser.add_argument(
        "--maxlen",
        type=maxlen_int,
        default=maxlen_default,
        help="tokens per sentence including [CLS] and [SEP]; longer sentences "
        "are truncated and counted; at most the model's "
        "max_position_embeddings" + ("" if maxlen_default else " (default: 128 for PAWSX, else 64)"),
    )
    if batches:
        _batch_options(parser)
    parser.add_argument(
        "--cased",
        action="store_true",
        help="keep letter case (default: lower-case, as uncased and Chinese BERT vocabularies expect)",
    )
    if rank_deficient:
        parser.add_argument(
            "--allow-rank-deficient",
            action="store_true",
            help="allow n_components above the rank of the covariance (fewer "
            "sentences than dimensions): those directions are noise",
        )


def _pooling_option(parser, pooling_default, poolings):
    """``--pooling``: one, or with ``poolings`` a comma-separated list (``args.poolings``; ``args.pooling``
    None)."""
    if poolings:  # several, scored on one encoding; the encoder config's pooling is unused
        parser.add_argument(
            "--pooling",
            dest="poolings",
            default=pooling_default,
            type=pooling_list,
            help="how token vectors become one sentence vector; comma-separated for several, "
            "all scored on one forward pass per batch (the tasks' sentences and the files read)",
        )
        parser.set_defaults(pooling=None)
    else:
        parser.add_argument(
            "--pooling",
            default=pooling_default,
            choices=POOLINGS,
            help="how token vectors become one sentence vector"
            + ("" if pooling_default else " (default: the whitening file's, else first-last-avg)"),
        )


def _batch_options(parser):
    """``--batch-size`` and ``--precision``: the commands that run the model here, batch by batch."""
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=128,
        help="sentences per model call (lower it for long --maxlen on a small machine)",
    )
    parser.add_argument(
        "--precision",
        default=os.environ.get(PRECISION_VARIABLE) or "auto",
        choices=PRECISIONS,
        help="bfloat16 products need AVX512_BF16 or AMX; auto checks them against float32 (-v: what "
        "it chose; docs/cli.md) (default: $%s, else auto)" % PRECISION_VARIABLE,
    )


def whitening_options(parser, what=None):
    """The whitening (or flow) file applied to the vectors; ``what``: the vectors that ``--no-normalize`` leaves
    unnormalised (none for an index, which holds unit vectors)."""
    parser.add_argument(
        "--whitening",
        metavar="FILE.npz",
        help="whitening file from `fit`; without it the pooled vectors are only normalised",
    )
    parser.add_argument(
        "--flow",
        metavar="FILE.npz",
        help="a BERT-flow file from `fit --method flow`, in place of --whitening (it keeps every dimension)",
    )
    parser.add_argument(
        "--n-components",
        type=int,
        default=None,
        help="whitened dimensions to keep: 0 = no whitening, negative = all "
        "(default: the value given to fit); needs --whitening",
    )
    if what:  # an index holds unit vectors: it takes no --no-normalize
        parser.add_argument(
            "--no-normalize", action="store_true", help="skip the final L2 normalisation of the %s" % what
        )


def codes_option(parser, help, many=False, default=None):
    """``--codes``: what vectors are stored in (`bert_whitening.codes`), one, or with ``many`` a
    comma-separated list of them; ``help`` says what they are for this command."""
    if many:
        parser.add_argument("--codes", type=code_list, default=default, metavar="CODES", help=help)
    else:
        parser.add_argument("--codes", choices=CODES, default=default, help=help)


def fit_options(parser):
    """What ``fit`` and ``beam-fit`` fit (n_components, beta, gamma), how they read, and their output."""
    parser.add_argument(
        "--n-components",
        type=int,
        default=-1,
        help="default number of whitened dimensions stored in the file: 0 = no "
        "whitening, negative = all; encode can choose another",
    )
    parser.add_argument(
        "--beta",
        type=finite_float,
        default=1.0,
        help="centre on beta * mean (kexue.fm/archives/9079): Sigma_beta = "
        "sum (x - beta*mean)^T (x - beta*mean) / (N - 1), bias = -beta * mean; "
        "1 = original whitening (Sigma = covariance), 0 = no centring (Sigma = "
        "raw second moment)",
    )
    parser.add_argument(
        "--gamma",
        type=finite_float,
        default=1.0,
        help="kernel = U diag(s ** (-gamma / 2)) with Sigma_beta = U diag(s) U^T (1 = original, 0 = rotation only)",
    )
    codes_option(
        parser,
        "what an encoder with this whitening writes: float32, int8 (a scale per whitened dimension, fitted "
        "here) or binary (a sign bit each); encode --codes can choose another",
        default="float32",
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=INPUT_FORMATS,
        help="lines: one sentence per line; pairs: senteval_cn "
        "sentence1<TAB>sentence2<TAB>label, both sentences used; auto: "
        "decided on the first 100 non-empty lines (and logged); a file "
        "mixing the two is refused",
    )
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed pair lines with a warning instead of stopping"
    )
    parser.add_argument("--output", required=True, metavar="FILE.npz", help="whitening (or flow) file to write")


def beam_options(parser):
    """The Beam commands' inputs and runner."""
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="GLOB",
        help="input files (local paths or any Beam file system, e.g. gs://); repeat for more patterns",
    )
    parser.add_argument(
        "--runner",
        default="DirectRunner",
        help="Beam runner; further Beam pipeline options (--project, "
        "--temp_location, --direct_num_workers, ...) are passed through",
    )


def flow_training_options(parser):
    """How a BERT-flow trains (with --method flow): BERT-flow's own defaults when not given."""
    parser.add_argument(
        "--flow-epochs",
        type=positive_float,
        default=None,
        help="passes over the vectors (default 1; fractions allowed)",
    )
    parser.add_argument("--flow-batch-size", type=positive_int, default=None, help="vectors a step (default 64)")
    parser.add_argument("--flow-learning-rate", type=positive_float, default=None, help="constant (default 1e-3)")


def flow_training(args, flows):
    """The ``--flow-*`` options given, as `bert_whitening.flow.fit_flow`'s keywords; refused when
    the command trains no flow (``flows`` false), where they would be ignored."""
    given = {
        name: value
        for name, value in (
            ("epochs", args.flow_epochs),
            ("batch_size", args.flow_batch_size),
            ("learning_rate", args.flow_learning_rate),
        )
        if value is not None
    }
    if given and not flows:
        raise BertWhiteningError(
            "--flow-epochs, --flow-batch-size and --flow-learning-rate train a flow: add --method flow"
        )
    return given

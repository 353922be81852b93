"""``export``: the whitened encoder as one verified SavedModel in TF Serving's ``BASE/N``."""

from bert_whitening.commands.base import ENCODER_INPUTS, Command, Paths, encoder_config
from bert_whitening.commands.options import model_options, positive_int, version_int, whitening_options
from bert_whitening.io.atomic import BASE
from bert_whitening.names import EXPORT_PRECISIONS
from bert_whitening.sentence_encoder import SentenceEncoder


def add_arguments(parser):
    model_options(parser, None, batches=False)
    whitening_options(parser, "embeddings")
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
        dest="export_precision",  # the SavedModel's, not this process's (`start`)
        choices=EXPORT_PRECISIONS,
        default="float32",
        help="bfloat16: the transformer's matrix products in bfloat16 (the rest float32), for a server "
        "whose CPU has AVX512_BF16 or AMX; use it instead of TF Serving's --mixed_precision=bfloat16, "
        "which also rounds the residual sums and layer norms (docs/serving.md)",
    )


def run_export(args):
    encoder = SentenceEncoder(encoder_config(args, whitened=True))
    from bert_whitening.export.options import ExportOptions

    options = ExportOptions(args.version, args.text, args.overwrite, args.top_k, args.export_precision)
    encoder.export(args.output, options, corpus=args.corpus)


COMMAND = Command(
    name="export",
    help="export the whitened encoder as a SavedModel",
    description="Write the encoder, its pooling, the whitening Dense and the L2 "
    "normalisation as one SavedModel in TF Serving's layout BASE/N, verified in a "
    "fresh process before it is moved into place.",
    add_arguments=add_arguments,
    run=run_export,
    paths=Paths({"output": BASE}, ENCODER_INPUTS + ("corpus",)),
    weights_read_only=False,
)

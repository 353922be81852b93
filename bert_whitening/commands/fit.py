"""``fit``: a whitening (or a BERT-flow) fitted on sentence files, written as one ``.npz``."""

import logging

from bert_whitening.commands.base import Command, Paths, encoder_config, start
from bert_whitening.commands.options import fit_options, flow_training, flow_training_options, model_options, seed_int
from bert_whitening.data import ReadOptions, check_readable
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.atomic import FILE
from bert_whitening.names import DEFAULT_POOLING
from bert_whitening.sentence_encoder import SentenceEncoder
from bert_whitening.whitening import FitOptions

logger = logging.getLogger("bert_whitening")


def add_arguments(parser):
    model_options(parser, DEFAULT_POOLING)
    parser.add_argument(
        "--method",
        default="whitening",
        choices=["whitening", "flow"],
        help="whitening: mean and covariance, streamed; flow: a BERT-flow (Glow as "
        "bohanli/BERT-flow trains it, one epoch) on every vector, held in memory, used "
        "with --flow; --n-components, --beta and --gamma are the whitening's",
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="the flow's initial values and order (--method flow)")
    flow_training_options(parser)
    fit_options(parser)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="sentence or pair files, - for standard input")


def fit_and_read(args):
    """The `FitOptions` and `ReadOptions` of ``fit`` and ``beam-fit`` (`fit_options`)."""
    options = FitOptions(args.n_components, args.beta, args.gamma, args.codes)
    return options, ReadOptions(args.format, args.skip_bad_lines, args.batch_size)


def run_fit(args):
    options, read = fit_and_read(args)
    if args.method == "flow" and options != FitOptions():
        raise BertWhiteningError(
            "--n-components, --beta, --gamma and --codes are a whitening's; a flow has none of them"
        )
    training = flow_training(args, args.method == "flow")
    check_readable(args.inputs)
    encoder = SentenceEncoder(encoder_config(args))
    start(args)
    from bert_whitening.progress import Progress

    with Progress("encoding", leave=True) as bar:
        if args.method == "flow":
            batch = {"flow_batch_size": training.pop("batch_size")} if "batch_size" in training else {}
            fitted = encoder.fit_flow(files=args.inputs, seed=args.seed, read=read, progress=bar, **batch, **training)
        else:
            fitted = encoder.fit(files=args.inputs, options=options, read=read, progress=bar)
    fitted.save(args.output)
    logger.info("wrote %s", args.output)


COMMAND = Command(
    name="fit",
    help="fit a whitening (or a BERT-flow) on sentence files",
    description="Encode every sentence of the INPUT files and fit the whitening (mean and "
    "covariance accumulated batch by batch) into one .npz file; with --method flow, train "
    "a BERT-flow on the vectors instead.",
    add_arguments=add_arguments,
    run=run_fit,
    paths=Paths({"output": FILE}, ("inputs", "model")),
    weights_read_only=True,
)

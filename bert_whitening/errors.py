"""The package's exceptions: one base class, so a caller (and the command line) can tell a
problem with the input from a bug.

Each subclass is a ``ValueError`` too, as the package raised before it had its own classes. The
message names the file (and the line, for text) and the value at fault.
"""

import signal

#: The signals that stop a command: the command line turns each into a clean stop with one line
#: (`bert_whitening.__main__`, `bert_whitening.cli.main`), and `bert_whitening.io.atomic` holds them
#: back across steps that must not be parted.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class BertWhiteningError(ValueError):
    """A refused input or a failed operation, explained in its message."""


class DataError(BertWhiteningError):
    """Bad input data; the message names the file and the 1-based line number."""


class CheckpointError(BertWhiteningError):
    """A model directory that cannot be used; the message names the file."""


class WhiteningError(BertWhiteningError):
    """A whitening that cannot be fitted, read or applied as asked."""


class ExportError(BertWhiteningError):
    """An export that was refused or failed; nothing was left at the target."""


class FlowError(BertWhiteningError):
    """A BERT-flow that cannot be configured, trained or read as asked."""


class TrainingError(BertWhiteningError):
    """A fine-tuning that was refused or stopped (a loss that is not finite); nothing was written."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like SIGINT's KeyboardInterrupt so the same clean-up runs; ``args[0]``
    is the signal number."""


def interrupted(number, placed=()):
    """The line for a command stopped by signal ``number`` once ``placed`` (`bert_whitening.io.atomic.placed_outputs`)
    were put in place: a signal after an output is published must not say nothing was written."""
    name = signal.Signals(number).name
    if not placed:
        return "interrupted by %s; nothing was written" % name
    return "interrupted by %s; %s written in full, nothing else" % (name, " and ".join(map(str, placed)))

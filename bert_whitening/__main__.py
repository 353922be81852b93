"""``bert-whitening`` and ``python -m bert_whitening``: `bert_whitening.cli.console_main`, with
the signals that stop a command (`STOPPING`) answered from the first moment.

`bert_whitening.cli` imports numpy and the package's modules before it sets its handlers; a
signal meanwhile would end the process with Python's traceback (SIGINT) or without a line
(SIGTERM, SIGHUP). Here only the standard library and `bert_whitening.errors` are imported
when the handlers are set, and such a signal stops the process with the command's line and
status: nothing has been written by then."""

import os
import signal
import sys

from bert_whitening.errors import STOPPING, interrupted


def _stopped_before_the_command(number, frame):
    sys.stderr.write("ERROR: %s\n" % interrupted(number))
    os._exit(128 + number)


def main():
    for number in STOPPING:
        signal.signal(number, _stopped_before_the_command)
    from bert_whitening.cli import console_main

    return console_main()


if __name__ == "__main__":
    sys.exit(main())

"""Reading sentence files and senteval_cn pair files, with errors that name file and line.

A pair file has one ``sentence1<TAB>sentence2<TAB>label`` per line, the label a number (0/1, or
a 0-5 score). A sentence file has one sentence per line; an empty line is an empty sentence.
Files are read line by line, never whole.
"""
import logging

logger = logging.getLogger(__name__)

FORMATS = ("auto", "lines", "pairs")


class DataError(ValueError):
    """Bad input data; the message names the file and the 1-based line number."""


def _lines(path):
    try:
        with open(path, encoding="utf-8", newline="") as stream:
            for number, line in enumerate(stream, 1):
                yield number, line.rstrip("\r\n")
    except FileNotFoundError:
        raise DataError("%s: no such file" % path) from None
    except UnicodeDecodeError as error:
        raise DataError("%s: not UTF-8 text (%s)" % (path, error)) from None
    except OSError as error:
        raise DataError("%s: cannot read (%s)" % (path, error.strerror)) from None


def parse_pair(line):
    """``(sentence1, sentence2, label)`` of a pair line, or None when it is not one."""
    fields = line.split("\t")
    if len(fields) != 3:
        return None
    try:
        return fields[0], fields[1], float(fields[2])
    except ValueError:
        return None


def read_pairs(path, skip_bad_lines=False):
    """Yield ``(sentence1, sentence2, label)``; a malformed line is an error, or with
    ``skip_bad_lines`` a skipped line counted in one warning at the end."""
    skipped = 0
    for number, line in _lines(path):
        pair = parse_pair(line)
        if pair is not None:
            yield pair
        elif skip_bad_lines:
            skipped += 1
        else:
            raise DataError("%s:%d: expected sentence1<TAB>sentence2<TAB>numeric label, got %r"
                            % (path, number, line[:200]))
    if skipped:
        logger.warning("%s: skipped %d malformed lines", path, skipped)


def detect_format(path):
    """``pairs`` when the first non-empty line is a pair line, else ``lines``."""
    for _, line in _lines(path):
        if line:
            return "pairs" if parse_pair(line) is not None else "lines"
    raise DataError("%s: empty input file" % path)


def read_sentences(path, format="auto", skip_bad_lines=False):
    """Yield the sentences of a file: every line of a sentence file, both sentences of a pair."""
    check_format(format)
    if format == "auto":
        format = detect_format(path)
    if format == "lines":
        for _, line in _lines(path):
            yield line
    else:
        for first, second, _ in read_pairs(path, skip_bad_lines):
            yield first
            yield second


def check_format(format):
    if format not in FORMATS:
        raise ValueError("unknown input format %r; choose one of: %s" % (format, ", ".join(FORMATS)))

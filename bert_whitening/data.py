"""Reading sentence files and senteval_cn pair files, with errors that name file and line.

A pair file has one ``sentence1<TAB>sentence2<TAB>label`` per line, the label a finite number
(0/1, or a 0-5 score). A sentence file has one sentence per line; an empty line is an empty
sentence. Every input is read once, line by line, never whole, so standard input (``-``), a pipe
or a FIFO works like a file; a line longer than `bert_whitening.io.bounded.LINE_BYTES` is refused
before it is read whole (``/dev/zero``, a compressed file that inflates to one endless line).
Lines end at ``\n`` only (one ``\r`` before it is dropped), so a stray ``\r`` inside a line
cannot shift the line numbers, and line *i* of a file is row *i* of what ``encode`` writes.
"""

import dataclasses
import glob
import gzip
import io
import itertools
import logging
import math
import os
import re
import stat
import sys
import zlib

from bert_whitening.arguments import boolean, positive_int
from bert_whitening.errors import DataError
from bert_whitening.io.bounded import LINE_BYTES
from bert_whitening.names import check_choice

logger = logging.getLogger(__name__)

INPUT_FORMATS = ("auto", "lines", "pairs")
SPLITS = ("train", "valid", "test")
#: The senteval_cn tasks of the original eval.py.
TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
ENGLISH_STS = "STS-B-en"
DATA_ENV = "BERT_WHITENING_DATA"
STDIN = "-"

#: Non-empty lines that ``auto`` looks at before it decides between sentences and pairs.
DETECT_LINES = 100

__all__ = [
    "DataError",
    "INPUT_FORMATS",
    "STDIN",
    "ReadOptions",
    "chunked",
    "data_dir",
    "distinct_sentences",
    "load_task",
    "open_local",
    "parse_pair",
    "read_pairs",
    "read_sentences",
]


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How input files become batches of sentences: ``format`` (`INPUT_FORMATS`),
    ``skip_bad_lines`` (a malformed pair line skipped with a warning rather than refused) and
    ``batch_size`` (sentences per forward pass).

    The commands that read files (``fit``, ``beam-fit``, ``eval``, ``eval-retrieval``) and their
    Python entry points pass one of these down to where the files are read and encoded, rather
    than the three values one by one; a value none of them can use is refused when it is built.
    """

    format: str = "auto"
    skip_bad_lines: bool = False
    batch_size: int = 128

    def __post_init__(self):
        check_choice("input format", self.format, INPUT_FORMATS)
        object.__setattr__(self, "skip_bad_lines", boolean(self.skip_bad_lines, "skip_bad_lines"))
        object.__setattr__(self, "batch_size", positive_int(self.batch_size, "batch_size"))


def open_local(path, digest=None):
    """A binary stream of a local file (``-``: standard input), decompressed when its name ends
    in ``.gz``. With ``digest`` (a hashlib object), the file's bytes are added to it as they are
    read: a stream (standard input, a FIFO) is read once, so its hash is taken on that reading,
    and a file's hash is of the bytes the lines came from, whatever happens to it afterwards."""
    stream = os.fdopen(os.dup(sys.stdin.fileno()), "rb") if path == STDIN else open(path, "rb")
    if digest is not None:
        stream = io.BufferedReader(_Hashed(stream, digest))
    return _Gzip(stream) if path.endswith(".gz") and path != STDIN else stream


class _Hashed(io.RawIOBase):
    """A binary stream adding what is read from it to a digest."""

    def __init__(self, stream, digest):
        super().__init__()
        self.stream, self.digest = stream, digest

    def readable(self):
        return True

    def readinto(self, buffer):
        count = self.stream.readinto(buffer)
        self.digest.update(memoryview(buffer)[:count])
        return count

    def close(self):
        self.stream.close()
        super().close()


class _Gzip(gzip.GzipFile):
    """The decompressed stream of a binary stream, closing that stream when closed."""

    def __init__(self, stream):
        super().__init__(fileobj=stream, mode="rb")
        self.compressed = stream

    def close(self):
        try:
            super().close()
        finally:
            self.compressed.close()


def check_readable(paths):
    """Refuse, before any work, input files that do not exist or cannot be read (``-``, FIFOs and
    other streams are read as they come), and a stream named twice (`check_read_once`)."""
    check_read_once(paths)
    for path in paths:
        if path == STDIN:
            continue
        if not os.path.exists(path):
            raise DataError("%s: no such file" % path)
        if os.path.isdir(path):
            raise DataError("%s: is a directory, not a file" % path)
        if not os.access(path, os.R_OK):
            raise DataError("%s: not readable (permission denied)" % path)


def check_read_once(paths):
    """Refuse a stream among the inputs of one run that is named twice (``- -``, ``-`` and
    ``/dev/stdin``, a FIFO by two names): standard input, a pipe or a FIFO is read once, and its
    second reading would find it empty, leaving out every line without a word."""
    seen = {}
    for path in paths:
        stream = _stream(path)
        if stream is None:
            continue
        if stream in seen:
            raise DataError(
                "cannot read %s twice (as %s and %s): standard input, a pipe or a FIFO can be read only once"
                % (display_name(path), seen[stream], path)
            )
        seen[stream] = path


def _stream(path):
    """``(device, inode)`` of ``path`` when it can be read only once (standard input, a FIFO, a
    socket, a character device), else None."""
    try:
        info = os.fstat(sys.stdin.fileno()) if path == STDIN else os.stat(path)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return STDIN if path == STDIN else None
    if path == STDIN or stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode) or stat.S_ISCHR(info.st_mode):
        return info.st_dev, info.st_ino
    return None


def display_name(path):
    return "standard input" if path == STDIN else path


def _encoding_hint(raw):
    """How to convert a line that is not UTF-8 when it reads as Chinese in GB18030 (GBK's and
    GB2312's superset, the usual encoding of Chinese text files that are not UTF-8), else "".
    """
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        return ""
    if not any("\u4e00" <= character <= "\u9fff" for character in text):
        return ""
    return "; it reads as GBK/GB18030 Chinese: convert it first, e.g. iconv -f GB18030 -t UTF-8"


def _lines(path, opener=open_local):
    """``(number, line)`` of each line, split on ``\n`` only; ``opener(path)`` gives a binary
    stream (Beam passes its FileSystems, which read ``gs://`` and the like)."""
    name, number = display_name(path), 0
    try:
        with opener(path) as stream:
            # Binary streams split on b"\n" only; a line is read up to its limit, never whole.
            for number, raw in enumerate(iter(lambda: stream.readline(LINE_BYTES + 2), b""), 1):
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                raw = raw[:-1] if raw.endswith(b"\r") else raw
                if len(raw) > LINE_BYTES:
                    raise DataError(
                        "%s:%d: a line longer than %d bytes, the limit of an input line (not text "
                        "with one sentence a line?)" % (name, number, LINE_BYTES)
                    )
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
                    raw = raw[3:]
                if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16's (and UTF-32's)
                    raise DataError(
                        "%s:1: UTF-16 or UTF-32 text (it starts with their byte-order mark), not UTF-8: "
                        "convert it first, e.g. iconv -f UTF-16 -t UTF-8" % name
                    )
                if b"\0" in raw:  # valid UTF-8, but text never holds it: UTF-16 without a BOM
                    raise DataError(
                        "%s:%d: a NUL byte at byte %d of the line: not UTF-8 text "
                        "(UTF-16 without a byte-order mark?)" % (name, number, raw.index(b"\0"))
                    )
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise DataError(
                        "%s:%d: not UTF-8 text (byte 0x%02x at byte %d of the line)%s"
                        % (name, number, raw[error.start], error.start, _encoding_hint(raw))
                    ) from None
    except FileNotFoundError:
        raise DataError("%s: no such file" % name) from None
    except IsADirectoryError:
        raise DataError("%s: is a directory, not a file" % name) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError("%s: truncated or corrupt compressed data after line %d (%s)" % (name, number, error)) from None
    except OSError as error:
        raise DataError("%s: cannot read after line %d (%s)" % (name, number, error.strerror or error)) from None


#: A label as data files write one: ASCII decimal digits, a point, an exponent. ``float`` alone
#: also takes ``1_0`` (10), full-width and Arabic-Indic digits, ``nan`` and ``inf``.
_DECIMAL = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def _number(text):
    """``float(text)`` when it is a finite decimal number, else None."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_pair(line):
    """``(sentence1, sentence2, label)`` of a pair line, or None when it is not one."""
    fields = line.split("\t")
    if len(fields) != 3:
        return None
    label = _number(fields[2])
    return None if label is None else (fields[0], fields[1], label)


def _records(numbered, name, parse, expected, skip_bad_lines=False, header=None):
    """Yield ``(number, parse(line))`` for each ``(number, line)``. A line it returns None for is
    an error naming file, line and content, or with ``skip_bad_lines`` a skipped line, counted in
    one warning at the end. A first line starting with ``header`` is passed over."""
    skipped = 0
    for number, line in numbered:
        if number == 1 and header and line.startswith(header):
            continue
        record = parse(line)
        if record is not None:
            yield number, record
        elif skip_bad_lines:
            skipped += 1
        else:
            raise DataError("%s:%d: %s, got %r" % (name, number, expected, line[:200]))
    if skipped:
        logger.warning("%s: skipped %d malformed lines", name, skipped)


PAIR_LINE = "expected sentence1<TAB>sentence2<TAB>label with a finite numeric label"


def read_pairs(path, skip_bad_lines=False, opener=open_local):
    """Yield ``(sentence1, sentence2, label)``; a malformed line is an error, or with
    ``skip_bad_lines`` a skipped line counted in one warning at the end."""
    return (
        pair for _, pair in _records(_lines(path, opener), display_name(path), parse_pair, PAIR_LINE, skip_bad_lines)
    )


def chunked(iterable, size):
    """Lists of up to ``size`` items of ``iterable``, read lazily."""
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _detect(name, head):
    """``pairs`` or ``lines`` from the first lines of a file, said in a log line. Where the two
    shapes mix, the majority decides when it is pairs (the reader then names the first line that
    is not one); a pair line among sentences is an error naming it."""
    shapes = [(number, parse_pair(line) is not None) for number, line in head if line]
    pairs = sum(is_pair for _, is_pair in shapes)
    if not shapes:
        return "lines"
    format = "pairs" if 2 * pairs >= len(shapes) else "lines"
    if format == "lines" and pairs:
        first = next(number for number, is_pair in shapes if is_pair)
        raise DataError(
            "%s:%d: a sentence1<TAB>sentence2<TAB>label line in a file whose other "
            "lines are sentences (%d of the first %d non-empty lines are pairs); give "
            "--format lines or --format pairs" % (name, first, pairs, len(shapes))
        )
    logger.info(
        "%s: read as %s (%d of the first %d non-empty lines are pair lines)",
        name,
        "senteval_cn pairs" if format == "pairs" else "sentences, one per line",
        pairs,
        len(shapes),
    )
    return format


def _sentence_lines(numbered, name):
    """The ``(number, line)`` of an auto-detected sentence file; a pair line after the first
    lines is an error."""
    for number, line in numbered:
        if parse_pair(line) is not None:
            raise DataError(
                "%s:%d: a sentence1<TAB>sentence2<TAB>label line in a file read as "
                "sentences (decided on its first %d non-empty lines); give --format "
                "lines or --format pairs" % (name, number, DETECT_LINES)
            )
        yield number, line


def read_sentences(path, format="auto", skip_bad_lines=False, opener=open_local, numbered=False):
    """Yield the sentences of a file: every line of a sentence file, both sentences of a pair;
    with ``numbered``, each as ``(number, sentence)``, the number of its line from 1 (both of a
    pair have their line's), for a message about a sentence to name its file and line.

    ``auto`` decides on the first `DETECT_LINES` non-empty lines of the same single read, so a
    pipe loses nothing; it logs what it decided.
    """
    for number, sentence in _numbered_sentences(path, format, skip_bad_lines, opener):
        yield (number, sentence) if numbered else sentence


def _numbered_sentences(path, format, skip_bad_lines, opener):
    check_choice("input format", format, INPUT_FORMATS)
    name, numbered = display_name(path), _lines(path, opener)
    if format == "auto":
        # The non-empty lines read to decide are held, the empty ones between them counted: a
        # file of endless empty lines must not be held whole before the first sentence.
        held, last = [], 0
        for last, line in numbered:
            if line:
                held.append((last, line))
                if len(held) == DETECT_LINES:
                    break
        format = _detect(name, held)
        head = _with_empty_lines(held, last)
        if format == "lines":
            yield from head
            yield from _sentence_lines(numbered, name)
            return
        numbered = itertools.chain(head, numbered)
    if format == "lines":
        yield from numbered
    else:
        for number, (first, second, _) in _records(numbered, name, parse_pair, PAIR_LINE, skip_bad_lines):
            yield number, first
            yield number, second


def _with_empty_lines(held, last):
    """``(number, line)`` of lines 1 to ``last``: the ``held`` non-empty ones, and the empty
    ones between them, made again as they are needed."""
    lines = dict(held)
    return ((number, lines.get(number, "")) for number in range(1, last + 1))


def distinct_sentences(splits):
    """Each sentence of ``{split: [(sentence1, sentence2, label)]}`` once, in file order."""
    return list(dict.fromkeys(s for pairs in splits.values() for a, b, _ in pairs for s in (a, b)))


def data_dir(given=None):
    """``--data-dir``, else ``$BERT_WHITENING_DATA``, else ``data/senteval_cn``."""
    return given or os.environ.get(DATA_ENV) or os.path.join("data", "senteval_cn")


def _fields(line, columns, label):
    """Selected tab-separated fields with the label as a float, or None when they are not there."""
    fields = line.split("\t")
    if max(columns + (label,)) >= len(fields) or _number(fields[label]) is None:
        return None
    return tuple(fields[c] for c in columns) + (_number(fields[label]),)


def _sts_benchmark(directory, skip_bad_lines=False):
    """English STS benchmark splits from ``stsbenchmark.tsv.gz`` (sentence-transformers' file:
    header, CRLF, ``split genre dataset year sid score s1 s2``) or the original
    ``sts-{train,dev,test}.csv`` (``genre file year id score s1 s2``, sometimes two more fields).
    Fields are split on tabs with no quoting: the sentences contain bare double quotes."""
    packed = os.path.join(directory, "stsbenchmark.tsv.gz")
    if os.path.lexists(packed):
        names = {"train": "train", "dev": "valid", "test": "test"}
        splits = {split: [] for split in SPLITS}
        parse = lambda line: _fields(line, (0, 6, 7), 5) if line.split("\t")[0] in names else None
        expected = "malformed line: expected split<TAB>genre<TAB>dataset<TAB>year<TAB>sid<TAB>score<TAB>s1<TAB>s2"
        records = _records(_lines(packed), packed, parse, expected, skip_bad_lines, "split\t")
        for _, (split, first, second, score) in records:
            splits[names[split]].append((first, second, score))
        return splits
    expected = "malformed line: expected genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2"
    files = (("train", "sts-train.csv"), ("valid", "sts-dev.csv"), ("test", "sts-test.csv"))
    paths = {split: os.path.join(directory, name) for split, name in files}
    return {
        split: [
            pair
            for _, pair in _records(_lines(path), path, lambda line: _fields(line, (5, 6), 4), expected, skip_bad_lines)
        ]
        for split, path in paths.items()
        if os.path.lexists(path)
    }


def check_labels(pairs, name, role):
    """Refuse ``pairs`` (of the file ``name``, a ``role`` file: train, valid or an evaluation
    split) that hold no pair, or whose labels are all equal: nothing to rank, no Spearman (scipy
    would give NaN with a warning)."""
    if not pairs:
        raise DataError("%s: the %s file holds no pairs" % (name, role))
    labels = [label for _, _, label in pairs]
    if all(label == labels[0] for label in labels):
        raise DataError(
            "%s:1-%d: every label is %g, one distinct label: the %s file has nothing to %s"
            % (name, len(pairs), labels[0], role, "rank" if role == "train" else "correlate with")
        )


def pair_file_task(task, directory):
    """Whether ``task`` names a pair file of the user's, scored as a task's test split: a
    regular file, where ``DIR/TASK`` (a senteval_cn task of that name) is not a directory."""
    return task != ENGLISH_STS and os.path.isfile(task) and not os.path.isdir(os.path.join(directory, task))


def task_files(directory, tasks):
    """The files ``load_task`` may read for ``tasks`` under ``directory`` (None: `data_dir`'s
    default), not the whole data directory: a report written beside the tasks, and written
    again by the next run, is no input."""
    directory = data_dir(directory)
    files = [task for task in tasks if pair_file_task(task, directory)]
    folders = [os.path.join(directory, task) for task in tasks if task not in files]
    if ENGLISH_STS in tasks:
        folders.append(os.path.join(directory, os.pardir, "stsbenchmark"))
    return files + [path for folder in folders for path in glob.glob(os.path.join(glob.escape(folder), "*"))]


def task_names(directory):
    """The tasks under ``directory``, built-in or not: each folder ``NAME`` that holds a split
    ``NAME/NAME.SPLIT.data`` (a task of the user's was left out of a refusal's list)."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(
        name
        for name in names
        if any(os.path.exists(os.path.join(directory, name, "%s.%s.data" % (name, split))) for split in SPLITS)
    )


def split_file(directory, task, split):
    """Where a senteval_cn task keeps a split: ``DIR/TASK/TASK.SPLIT.data``; a pair file given as
    the task is its test split; for the English STS benchmark (several files or one), a name for
    messages."""
    if task == ENGLISH_STS:
        return "%s %s split" % (task, split)
    if pair_file_task(task, directory):
        return task if split == "test" else "%s (a pair file: its test split alone)" % task
    return os.path.join(directory, task, "%s.%s.data" % (task, split))


def load_task(task, directory=None, skip_bad_lines=False):
    """``{split: [(sentence1, sentence2, label)]}`` for the splits present, with a log line
    naming the missing ones. senteval_cn tasks live in ``DIR/TASK/TASK.SPLIT.data``;
    ``STS-B-en`` in ``DIR/STS-B-en/`` or ``DIR/../stsbenchmark/``; a pair file of the user's
    given as the task is scored as its test split (`pair_file_task`)."""
    directory = data_dir(directory)
    if pair_file_task(task, directory):
        logger.info("%s: a pair file, scored as a task's test split", task)
        return {"test": list(read_pairs(task, skip_bad_lines))}
    if task == ENGLISH_STS:
        for candidate in (os.path.join(directory, ENGLISH_STS), os.path.join(directory, os.pardir, "stsbenchmark")):
            if os.path.isdir(candidate):
                splits = _sts_benchmark(candidate, skip_bad_lines)
                break
        else:
            raise DataError(
                "%s: no English STS benchmark under %s/%s or %s/../stsbenchmark"
                % (task, directory, ENGLISH_STS, directory)
            )
    else:
        splits, files = {}, {split: split_file(directory, task, split) for split in SPLITS}
        for split, path in files.items():
            if os.path.lexists(path):  # a dangling link is read, and refused: not a missing split
                splits[split] = list(read_pairs(path, skip_bad_lines))
        pattern = os.path.join(glob.escape(os.path.join(directory, task)), glob.escape(task) + ".*.data")
        others = sorted(os.path.basename(path) for path in glob.glob(pattern) if path not in files.values())
        if others:  # a dev split, say: said, not scored in silence
            logger.info("%s: %s not read: the splits are %s", task, ", ".join(others), "/".join(SPLITS))
        if not splits:
            present = task_names(directory)
            raise DataError(
                "%s: no %s.{train,valid,test}.data under %s (tasks there: %s; a pair file is taken as a task too)"
                % (task, task, os.path.join(directory, task), ", ".join(present) or "none")
            )
    missing = [split for split in SPLITS if split not in splits]
    if missing:
        logger.info("%s: no %s split; evaluating %s", task, "/".join(missing), "/".join(splits))
    return splits

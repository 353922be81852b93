"""Reading sentence files and senteval_cn pair files, with errors that name file and line.

A pair file has one ``sentence1<TAB>sentence2<TAB>label`` per line, the label a number (0/1, or
a 0-5 score). A sentence file has one sentence per line; an empty line is an empty sentence.
Files are read line by line, never whole.
"""
import gzip
import io
import itertools
import logging
import os

from bert_whitening.names import check_choice

logger = logging.getLogger(__name__)

FORMATS = ("auto", "lines", "pairs")
SPLITS = ("train", "valid", "test")
ENGLISH_STS = "STS-B-en"
DATA_ENV = "BERT_WHITENING_DATA"


class DataError(ValueError):
    """Bad input data; the message names the file and the 1-based line number."""


def open_local(path):
    """A binary stream of a local file, decompressed when its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _lines(path, opener=open_local):
    """``(number, line)`` of each line; ``opener(path)`` gives a binary stream (Beam passes
    its FileSystems, which read ``gs://`` and the like)."""
    try:
        with io.TextIOWrapper(opener(path), encoding="utf-8", newline="") as stream:
            for number, line in enumerate(stream, 1):
                yield number, line.rstrip("\r\n")
    except FileNotFoundError:
        raise DataError("%s: no such file" % path) from None
    except UnicodeDecodeError as error:
        raise DataError("%s: not UTF-8 text (%s)" % (path, error)) from None
    except OSError as error:
        raise DataError("%s: cannot read (%s)" % (path, error.strerror or error)) from None


def parse_pair(line):
    """``(sentence1, sentence2, label)`` of a pair line, or None when it is not one."""
    fields = line.split("\t")
    if len(fields) != 3:
        return None
    try:
        return fields[0], fields[1], float(fields[2])
    except ValueError:
        return None


def _records(path, parse, expected, skip_bad_lines=False, header=None, opener=open_local):
    """Yield ``parse(line)`` for each line of ``path``. A line it returns None for is an error
    naming file, line and content, or with ``skip_bad_lines`` a skipped line, counted in one
    warning at the end. A first line starting with ``header`` is passed over."""
    skipped = 0
    for number, line in _lines(path, opener):
        if number == 1 and header and line.startswith(header):
            continue
        record = parse(line)
        if record is not None:
            yield record
        elif skip_bad_lines:
            skipped += 1
        else:
            raise DataError("%s:%d: %s, got %r" % (path, number, expected, line[:200]))
    if skipped:
        logger.warning("%s: skipped %d malformed lines", path, skipped)


def read_pairs(path, skip_bad_lines=False, opener=open_local):
    """Yield ``(sentence1, sentence2, label)``; a malformed line is an error, or with
    ``skip_bad_lines`` a skipped line counted in one warning at the end."""
    return _records(path, parse_pair, "expected sentence1<TAB>sentence2<TAB>numeric label",
                    skip_bad_lines, opener=opener)


def chunked(iterable, size):
    """Lists of up to ``size`` items of ``iterable``, read lazily."""
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def detect_format(path, opener=open_local):
    """``pairs`` when the first non-empty line is a pair line, else ``lines``."""
    for _, line in _lines(path, opener):
        if line:
            return "pairs" if parse_pair(line) is not None else "lines"
    raise DataError("%s: empty input file" % path)


def read_sentences(path, format="auto", skip_bad_lines=False, opener=open_local):
    """Yield the sentences of a file: every line of a sentence file, both sentences of a pair."""
    check_choice("input format", format, FORMATS)
    if format == "auto":
        format = detect_format(path, opener)
    if format == "lines":
        for _, line in _lines(path, opener):
            yield line
    else:
        for first, second, _ in read_pairs(path, skip_bad_lines, opener):
            yield first
            yield second


def distinct_sentences(splits):
    """Each sentence of ``{split: [(sentence1, sentence2, label)]}`` once, in file order."""
    return list(dict.fromkeys(s for pairs in splits.values() for a, b, _ in pairs for s in (a, b)))


def data_dir(given=None):
    """``--data-dir``, else ``$BERT_WHITENING_DATA``, else ``data/senteval_cn``."""
    return given or os.environ.get(DATA_ENV) or os.path.join("data", "senteval_cn")


def _fields(line, columns, label):
    """Selected tab-separated fields with the label as a float, or None when they are not there."""
    fields = line.split("\t")
    try:
        return tuple(fields[c] for c in columns) + (float(fields[label]),)
    except (IndexError, ValueError):
        return None


def _sts_benchmark(directory, skip_bad_lines=False):
    """English STS benchmark splits from ``stsbenchmark.tsv.gz`` (sentence-transformers' file:
    header, CRLF, ``split genre dataset year sid score s1 s2``) or the original
    ``sts-{train,dev,test}.csv`` (``genre file year id score s1 s2``, sometimes two more fields).
    Fields are split on tabs with no quoting: the sentences contain bare double quotes."""
    packed = os.path.join(directory, "stsbenchmark.tsv.gz")
    if os.path.exists(packed):
        names = {"train": "train", "dev": "valid", "test": "test"}
        splits = {split: [] for split in SPLITS}
        parse = lambda line: (_fields(line, (0, 6, 7), 5) if line.split("\t")[0] in names else None)
        expected = "malformed line: expected split<TAB>genre<TAB>dataset<TAB>year<TAB>sid<TAB>score<TAB>s1<TAB>s2"
        for split, first, second, score in _records(packed, parse, expected, skip_bad_lines, "split\t"):
            splits[names[split]].append((first, second, score))
        return splits
    expected = "malformed line: expected genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2"
    files = (("train", "sts-train.csv"), ("valid", "sts-dev.csv"), ("test", "sts-test.csv"))
    return {split: list(_records(os.path.join(directory, name), lambda line: _fields(line, (5, 6), 4),
                                 expected, skip_bad_lines))
            for split, name in files if os.path.exists(os.path.join(directory, name))}


def load_task(task, directory=None, skip_bad_lines=False):
    """``{split: [(sentence1, sentence2, label)]}`` for the splits present, with a log line
    naming the missing ones. senteval_cn tasks live in ``DIR/TASK/TASK.SPLIT.data``;
    ``STS-B-en`` in ``DIR/STS-B-en/`` or ``DIR/../stsbenchmark/``."""
    directory = data_dir(directory)
    if task == ENGLISH_STS:
        for candidate in (os.path.join(directory, ENGLISH_STS),
                          os.path.join(directory, os.pardir, "stsbenchmark")):
            if os.path.isdir(candidate):
                splits = _sts_benchmark(candidate, skip_bad_lines)
                break
        else:
            raise DataError("%s: no English STS benchmark under %s/%s or %s/../stsbenchmark"
                            % (task, directory, ENGLISH_STS, directory))
    else:
        splits = {}
        for split in SPLITS:
            path = os.path.join(directory, task, "%s.%s.data" % (task, split))
            if os.path.exists(path):
                splits[split] = list(read_pairs(path, skip_bad_lines))
        if not splits:
            raise DataError("%s: no %s.{train,valid,test}.data under %s"
                            % (task, task, os.path.join(directory, task)))
    missing = [split for split in SPLITS if split not in splits]
    if missing:
        logger.info("%s: no %s split; evaluating %s", task, "/".join(missing), "/".join(splits))
    return splits

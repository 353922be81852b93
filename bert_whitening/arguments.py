"""Types at the front door: the checks every public function applies to what it is handed.

A ``str`` where a list of sentences is expected would be encoded character by character, and a
``"128"`` batch size would fail deep inside with a ``TypeError``; each check here turns such a
call into one `BertWhiteningError` naming the argument and what it got. numpy only.
"""

import collections.abc
import dataclasses
import math
import numbers
import os

import numpy as np

from bert_whitening.errors import BertWhiteningError

#: Characters of a refused value shown in a message.
SHOWN = 40


def shown(value):
    """``value`` as a refusal shows it: its repr, cut to `SHOWN` characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def is_number(value, whole=False):
    """Whether ``value`` is a real number (an integral one, ``whole``), numpy's too: not a bool,
    which Python counts as an int (``True`` is no batch size), nor a ``"2e-5"``. The one such
    check of the package."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Integral if whole else numbers.Real)


def is_finite_number(value):
    """Whether ``value`` is a real number (`is_number`) that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def number(value, name, error=BertWhiteningError, whole=False):
    """``value`` when it is a number (a whole one, ``whole``: `is_number`); else ``error``
    naming ``name`` and what it got."""
    if not is_number(value, whole):
        what = "a whole number" if whole else "a number"
        raise error("%s must be %s, got %s %s" % (name, what, type(value).__name__, shown(value)))
    return value


def finite_number(value, name, error=BertWhiteningError):
    """``value`` as a float when it is a finite number (`is_finite_number`); else ``error``."""
    if not is_finite_number(value):
        raise error("%s must be a finite number, got %s" % (name, shown(value)))
    return float(value)


def container(value, name, what, one="sentence"):
    """Refuse what cannot be a list of ``what``: None, a single str or bytes, or a 0-d numpy
    array of one (``one`` of them: the hint says to put it in a list), a non-iterable."""
    single = isinstance(value, (str, bytes, bytearray)) or getattr(value, "ndim", None) == 0
    if value is None or single or not hasattr(value, "__iter__"):
        hint = " (one %s: put it in a list)" % one if single else ""
        raise BertWhiteningError(
            "%s must be a list of %s, got %s %s%s" % (name, what, type(value).__name__, shown(value), hint)
        )


def _text(item, name, index):
    """``item`` when it is a str that is text: a lone surrogate (``"\\ud800"``, what
    ``surrogateescape`` makes of bytes that are not UTF-8) has no UTF-8 form, so a file holding it
    is refused when read and a served model refuses it; here too, naming where it is."""
    if not isinstance(item, str):
        raise BertWhiteningError("%s[%d] must be a str, got %s %s" % (name, index, type(item).__name__, shown(item)))
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BertWhiteningError(
            "%s[%d] is not text: a lone surrogate %s at character %d"
            % (name, index, shown(item[error.start]), error.start)
        ) from None
    return item


def sentence_list(value, name="sentences"):
    """``value`` as a list of str, each item checked."""
    return str_list(value, name, "sentences (str)")


def sentence_stream(value, name="sentences"):
    """``value`` as an iterator of str. A sequence (a list, a tuple: held already) is checked
    whole at once, so that a bad item is refused before any work; any other iterable (a
    generator, a file: perhaps too long to hold) item by item as it is read."""
    container(value, name, "sentences (str)")
    if isinstance(value, collections.abc.Sequence):
        return iter(sentence_list(value, name))
    return (_text(item, name, index) for index, item in enumerate(value))


def id_lists(value, name, limit, bounds):
    """``value`` as a list of lists of int in ``[0, limit)`` (``bounds`` says which and why, in a
    refusal): token or segment ids. A row is a sequence or a 1-D array, an id an integer (not a
    bool): converting with ``int`` would take 1.7 as 1, ``"7"`` as 7 and True as 1, and read a
    str of digits as one row per character."""
    container(value, name, "id lists")
    rows = []
    for index, row in enumerate(value):
        array = hasattr(row, "tolist") and getattr(row, "ndim", None) == 1  # numpy's, read as Python ints
        if not array and (isinstance(row, (str, bytes, bytearray)) or not isinstance(row, collections.abc.Sequence)):
            raise BertWhiteningError(
                "%s[%d] must be a list of ids, got %s %s" % (name, index, type(row).__name__, shown(row))
            )
        row = row.tolist() if array else list(row)
        if not set(map(type, row)) <= {int} or (row and not 0 <= min(row) <= max(row) < limit):
            for column, item in enumerate(row):
                where = "%s[%d][%d]" % (name, index, column)
                if not is_number(item, whole=True):
                    raise BertWhiteningError("%s must be an int, got %s %s" % (where, type(item).__name__, shown(item)))
                if not 0 <= item < limit:
                    raise BertWhiteningError("%s is %d: %s" % (where, item, bounds))
        rows.append([int(item) for item in row])
    return rows


#: numpy's kinds of real numbers, what vectors may hold: floats, signed and unsigned integers. A
#: complex array would lose its imaginary part (numpy only warns), a bool, string or object array
#: be read as numbers it does not hold (strings parsed), so each is refused.
REAL_KINDS = "fiu"


def vector_array(value, name, error=BertWhiteningError, dim=None, holder=""):
    """``value`` as a 2-D numpy array of vectors, one a row, of at least one column (of ``dim``
    columns when given, which ``holder`` names: "the whitening's is"), holding real numbers
    (`REAL_KINDS`); else one ``error`` naming ``name``. A memory-mapped array is not read.
    Without a column, the statistics of the vectors would fail later, in numpy, with no name."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as failure:  # rows of unequal lengths, say
        raise error("%s: not an array of vectors (%s)" % (name, failure)) from None
    if array.dtype.kind not in REAL_KINDS:
        raise error("%s: holds %s, expected vectors of real numbers (float or int)" % (name, array.dtype))
    if array.ndim != 2 or array.shape[1] < 1:
        raise error(
            "%s: expected a 2-D array of vectors (one a row, at least one column), got shape %s" % (name, array.shape)
        )
    if dim is not None and array.shape[1] != dim:
        raise error("%s: vectors of dimension %d, %s %d" % (name, array.shape[1], holder, dim))
    return array


def path_list(value, name="files"):
    """``value`` as a list of path strings (``pathlib`` paths are taken as their strings)."""
    container(value, name, "file paths", one="file")
    return [
        _text(os.fspath(item) if isinstance(item, os.PathLike) else item, name, index)
        for index, item in enumerate(value)
    ]


def positive_int(value, name, error=BertWhiteningError):
    """``value`` as an int of at least 1 (a bool is not a count)."""
    if not is_number(value, whole=True) or value < 1:
        raise error("%s must be a positive integer, got %s" % (name, shown(value)))
    return int(value)


def integer(value, name, error=BertWhiteningError):
    """``value`` as an int of any sign (a bool, a float or a ``"64"`` is not one)."""
    if not is_number(value, whole=True):
        raise error("%s must be an integer, got %s %s" % (name, type(value).__name__, shown(value)))
    return int(value)


#: TF Serving's versions are int64: a larger one cannot be served.
MAX_VERSION = 2**63 - 1


#: The most shards ``beam-encode`` writes: a file each, and Beam plans every one before the first
#: is written (a count in the millions held memory and time without end before any output).
MAX_SHARDS = 10_000


def shard_count(value, name="num_shards"):
    """``value`` as a number of output shards, 0 (the runner chooses) to `MAX_SHARDS`."""
    if not is_number(value, whole=True) or not 0 <= value <= MAX_SHARDS:
        raise BertWhiteningError(
            "%s must be an integer 0..%d (0: the runner chooses), got %s" % (name, MAX_SHARDS, shown(value))
        )
    return int(value)


def serving_version(value, error=BertWhiteningError):
    """``value`` as a TF Serving model version: an int from 0 to `MAX_VERSION`, the integer
    directory names under a model's base and what the REST and gRPC APIs address (a ``"1"`` or
    a 1.0 would be a TypeError there, or another path). Raised as ``error``."""
    if not is_number(value, whole=True) or not 0 <= value <= MAX_VERSION:
        raise error("version must be an integer 0..2**63-1 (TF Serving's int64 versions), got %s" % shown(value))
    return int(value)


def optional_integer(value, name):
    """``value`` as an int, or None."""
    return None if value is None else integer(value, name)


def boolean(value, name, error=BertWhiteningError):
    """``value`` as a bool: True or False (numpy's too), not a ``"no"`` that would be taken as
    true, nor a 0 or 1. Raised as ``error``."""
    if not isinstance(value, (bool, np.bool_)):
        raise error("%s must be True or False, got %s %s" % (name, type(value).__name__, shown(value)))
    return bool(value)


def text(value, name):
    """``value`` when it is a str."""
    if not isinstance(value, str):
        raise BertWhiteningError("%s must be a str, got %s %s" % (name, type(value).__name__, shown(value)))
    return value


def path(value, name):
    """``value`` as a path string (a ``pathlib`` path is taken as its string); not None, not a list."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise BertWhiteningError(
            "%s must be a path (str or pathlib.Path), got %s %s" % (name, type(value).__name__, shown(value))
        )
    return value


def optional_path(value, name):
    """``value`` as a path string, or None."""
    return None if value is None else path(value, name)


def str_list(value, name, what, one="sentence"):
    """``value`` as a list of str (``what``: what each names), refusing a single str, which
    would be iterated character by character (``one`` of them, the hint says), and what has no
    order to give results in: a set (its order is the hashes') or a mapping (its keys would be
    taken)."""
    container(value, name, what, one)
    if isinstance(value, (collections.abc.Set, collections.abc.Mapping)):
        kind = "set" if isinstance(value, collections.abc.Set) else "mapping"
        raise BertWhiteningError(
            "%s must be a list of %s, got %s %s: results come in the list's order, and a %s has none"
            % (name, what, type(value).__name__, shown(value), kind)
        )
    return [_text(item, name, index) for index, item in enumerate(value)]


def options_from(kind, options, keywords, name="options"):
    """``options`` when it is a ``kind`` (a frozen options dataclass, checked when it was built),
    else one built of ``keywords``: the Python API's two ways of giving the same options, with
    one line for a value of the wrong kind, an unknown keyword, or both ways at once (the
    keywords would be ignored)."""
    if options is None:
        fields = [field.name for field in dataclasses.fields(kind)]
        unknown = [keyword for keyword in keywords if keyword not in fields]
        if unknown:
            raise BertWhiteningError(
                "unknown option %s (%s takes: %s)" % (shown(unknown[0]), kind.__name__, ", ".join(fields))
            )
        return kind(**keywords)
    options_of(kind, options, name)
    if keywords:
        raise BertWhiteningError(
            "%s: give %s or its keywords, not both (%s given too)" % (name, _named(kind), ", ".join(keywords))
        )
    return options


def options_of(kind, value, name="options", error=BertWhiteningError):
    """``value`` when it is a ``kind`` (an options dataclass, checked when it was built), else
    one ``error`` naming ``name``: a library function handed the wrong object says so, not an
    attribute error deep inside."""
    if not isinstance(value, kind):
        raise error("%s must be %s, got %s %s" % (name, _named(kind), type(value).__name__, shown(value)))
    return value


def _named(kind):
    """``kind``'s name after its article: "an ExportOptions", "a FitOptions"."""
    return ("an %s" if kind.__name__[0] in "AEIOU" else "a %s") % kind.__name__


def value_tuple(value, name, check):
    """``value`` (a list or tuple, not a str) as a tuple, each item passed through ``check(item,
    "name[i]")``: an options object keeps its lists as tuples, which stay as they were checked."""
    container(value, name, "values", one="value")
    return tuple(check(item, "%s[%d]" % (name, index)) for index, item in enumerate(value))


def split_keywords(keywords, kinds, what):
    """``keywords`` shared out among the options dataclasses ``kinds``, one dict each, by their
    fields; one not among any is refused, naming what ``what`` (a method) takes."""
    names = [[field.name for field in dataclasses.fields(kind)] for kind in kinds]
    taken = [name for fields in names for name in fields]
    unknown = [keyword for keyword in keywords if keyword not in taken]
    if unknown:
        raise BertWhiteningError("unknown option %s (%s takes: %s)" % (shown(unknown[0]), what, ", ".join(taken)))
    return [{key: value for key, value in keywords.items() if key in fields} for fields in names]

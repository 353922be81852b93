"""Records: every JSON the package reads, parsed in one place and checked against one schema rule.

A record (a whitening's or a flow's metadata, an encoder record, ``index.json``, an export's
record, a shard manifest, a model's ``bert_config.json``, a reply of TF Serving, a training
state) comes from a file someone may edit or a peer that may answer anything, so each is parsed
by `parse_json`, strictly: text that is not UTF-8, a key given twice (``json.loads`` keeps the
last one, which another reader would not), ``NaN`` or ``Infinity`` (not JSON: no other reader
takes them) and nesting deeper than Python's parser goes are one refusal naming the file. Its
keys are then checked by `check_fields` against a `Schema`, their kinds by `fits`, the one
type rule: a bool is not a number. numpy and the standard library only.
"""

import dataclasses
import json
import os

from bert_whitening.arguments import shown
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.bounded import JSON_BYTES, read_limited
from bert_whitening.io.files import CheckedFile

#: A schema's kind for a key that may hold anything (its reader checks it further).
ANY = object


@dataclasses.dataclass(frozen=True)
class Schema:
    """What a record's keys hold: ``required`` (key -> kind) must be there, ``optional`` (records
    of earlier versions lack them) are checked when present. A kind is a type or a tuple of
    types (`fits`); other keys are the reader's to check or leave."""

    required: dict = dataclasses.field(default_factory=dict)
    optional: dict = dataclasses.field(default_factory=dict)


def _refused_constant(constant):
    raise ValueError("%s is not a JSON number" % constant)


def _no_duplicates(pairs):
    record = dict(pairs)
    if len(record) != len(pairs):
        seen = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError("the key %s is given twice" % shown(twice))
    return record


def parse_json(data, where, error=BertWhiteningError):
    """The JSON value of ``data`` (str, or bytes that must be UTF-8); else ``error`` (an exception
    class, or a callable that raises or returns one) naming ``where``, the one "not valid JSON"
    refusal of the package."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_refused_constant)
    except RecursionError:
        problem = "nested too deeply to be read"
    except ValueError as failure:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        problem = str(failure)
    raise error("%s is not valid JSON (%s)" % (where, problem))


def as_read(value):
    """``value`` as a record holding it reads back (lists for tuples, str keys), to compare what
    was written with what is read."""
    return parse_json(json.dumps(value), "a record")


def fits(value, kind):
    """Whether ``value`` is of ``kind`` (a type or a tuple of types; `ANY` for anything): a
    bool is of kind bool (or `ANY`) alone, not int, though Python counts it as one."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds and ANY not in kinds:
        return False
    return isinstance(value, kinds)


def kind_name(kind):
    """``int``, ``dict or None``: a kind as a refusal names it."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if one is type(None) else "anything" if one is ANY else one.__name__ for one in kinds)


def check_fields(record, schema, where, error=BertWhiteningError):
    """``record`` when it is a JSON object whose keys are as ``schema`` says; else ``error``
    naming ``where`` and the first key at fault (absent, or of another kind)."""
    if not isinstance(record, dict):
        raise error("%s: expected a JSON object, got %s" % (where, type(record).__name__))
    for fields, required in ((schema.required, True), (schema.optional, False)):
        for key, kind in fields.items():
            if key not in record:
                if required:
                    raise error("%s has no %r" % (where, key))
            elif not fits(record[key], kind):
                raise error("%s: %r is %s, expected %s" % (where, key, shown(record[key]), kind_name(kind)))
    return record


def parse_record(data, schema, where, error=BertWhiteningError):
    """The JSON object of ``data`` (bytes or str already read: from a checked descriptor, an
    ``.npz`` member, a reply) checked against ``schema`` (None: any object)."""
    return check_fields(parse_json(data, where, error), schema or Schema(), where, error)


def read_record(source, schema=None, error=BertWhiteningError, what="record"):
    """The JSON object of ``source``, checked against ``schema`` (None: any object): a path (a
    regular file read to `JSON_BYTES`, ``what`` naming it in a refusal), or a `CheckedFile`
    (read from the descriptor that was checked)."""
    if isinstance(source, CheckedFile):
        data = source.read()
        return parse_record(data.getvalue(), schema, data.name, error)
    path = os.fspath(source)
    return parse_record(read_limited(path, JSON_BYTES, error, what), schema, path, error)

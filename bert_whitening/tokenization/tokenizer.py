"""bert4keras' tokenizer with its pass over the characters done by one ``str.translate``.

bert4keras' ``Tokenizer._tokenize`` builds the text it splits into words a character at a time,
asking four Python functions of each character whether it is punctuation or a CJK ideograph (a
token of its own, spaced), a space, or a control character (dropped). That loop was most of
the tokenizer's time, and tokenising is the one stage of `encode` ahead of the model
(docs/performance.md). What the loop makes of a character depends on the character alone, so
`Tokenizer` asks bert4keras' own functions once per character and lets ``str.translate`` apply
the answers: the same words, the same ids (`tests/tokenization/test_tokenizer.py` compares them on every code
point and every sentence of the shared data). Lower-casing, the optional word-level
pre-tokenisation and the word pieces are bert4keras' own.
"""

from bert_whitening.backend import Tokenizer as Bert4kerasTokenizer

# isort: split
from bert4keras.tokenizers import lowercase_and_normalize  # imported by backend's import, as it must be

#: The code points whose answers `_Spacing` keeps: the Basic Multilingual Plane's.
REMEMBERED_BELOW = 0x10000


class _Spacing(dict):
    """Code point -> what bert4keras' character loop writes for it (``None``: nothing), for
    ``str.translate``; each answer computed on the character's first sight, from bert4keras'
    own tests in their order. One table for every tokenizer: the answers depend on no
    vocabulary or setting. Only the Basic Multilingual Plane's are kept (`REMEMBERED_BELOW`),
    which bounds the table whatever the text (a text of every code point would add over a
    million entries); rarer characters are answered afresh each time."""

    def __missing__(self, code):
        character, rules = chr(code), Bert4kerasTokenizer
        if rules._is_punctuation(character) or rules._is_cjk_character(character):
            spaced = " " + character + " "
        elif rules._is_space(character):
            spaced = " "
        elif code == 0 or code == 0xFFFD or rules._is_control(character):
            spaced = None
        else:
            spaced = character
        if code < REMEMBERED_BELOW:
            self[code] = spaced
        return spaced


_SPACING = _Spacing()


#: Words whose pieces a `Tokenizer` remembers: the words of a language's text are mostly
#: its most frequent ones, and a CJK ideograph is a word of its own.
WORDS_REMEMBERED = 1 << 16


class Tokenizer(Bert4kerasTokenizer):
    """bert4keras' ``Tokenizer`` (same arguments, same ids), its character pass a translation,
    and the pieces of the words it has seen remembered (`WORDS_REMEMBERED` at most)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pieces = {}

    def _pieces_of(self, word):
        pieces = self._pieces.get(word)
        if pieces is None:
            if len(self._pieces) >= WORDS_REMEMBERED:
                self._pieces.clear()
            pieces = self._pieces[word] = tuple(self._word_piece_tokenize(word))
        return pieces

    def _tokenize(self, text, pre_tokenize=True):
        if self._do_lower_case:
            text = lowercase_and_normalize(text)
        if pre_tokenize and self._pre_tokenize is not None:
            tokens = []
            for word in self._pre_tokenize(text):
                tokens.extend([word] if word in self._token_dict else self._tokenize(word, False))
            return tokens
        return [piece for word in text.translate(_SPACING).split() for piece in self._pieces_of(word)]

"""`bert_whitening.tokenization.token_ids`: ids cut as bert4keras cuts them, and padded to one length."""

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer
from bert_whitening.tokenization.token_ids import pad_ids, token_ids

from helpers import TINY_VOCAB


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer({token: i for i, token in enumerate(TINY_VOCAB)}, do_lower_case=True)


@pytest.mark.parametrize("maxlen", [2, 3, 5, 8, 64])
@pytest.mark.parametrize("text", ["", "今天天气很好", "我们在北京喝茶 the cat is on the mat"])
def test_ids_are_cut_as_bert4keras_cuts_them(tokenizer, text, maxlen):
    ids, cut = token_ids(tokenizer, text, maxlen)
    expected = tokenizer.encode(text, maxlen=maxlen)[0]
    assert ids == expected
    assert cut == (len(tokenizer.encode(text)[0]) > maxlen)
    assert ids[0] == tokenizer._token_start_id and ids[-1] == tokenizer._token_end_id


def test_ids_are_padded_with_zeros_to_the_longest():
    padded = pad_ids([[101, 7, 102], [101, 102], (5,)])
    assert padded.dtype == np.int32
    assert padded.tolist() == [[101, 7, 102], [101, 102, 0], [5, 0, 0]]
    assert pad_ids([]).shape == (0, 0)

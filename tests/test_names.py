"""`bert_whitening.names`: what a fitted file records, checked in one line."""

import pytest

from bert_whitening.errors import WhiteningError
from bert_whitening.names import RECORDED_POOLINGS, check_recorded, checked_tokenization


def test_a_recorded_value_is_taken_only_from_its_choices():
    for pooling in RECORDED_POOLINGS:
        check_recorded(pooling, RECORDED_POOLINGS, WhiteningError, "w.npz: 'pooling'")
    with pytest.raises(WhiteningError, match=r"^w\.npz: 'pooling' is 'max', expected one of '', "):
        check_recorded("max", RECORDED_POOLINGS, WhiteningError, "w.npz: 'pooling'")


@pytest.mark.parametrize("value", [{}, {"maxlen": 2, "lowercase": True}, {"maxlen": 512, "lowercase": False}])
def test_a_tokenization_is_empty_or_a_maxlen_and_a_case(value):
    assert checked_tokenization(value, WhiteningError, "w.npz: 'tokenization'") == value


@pytest.mark.parametrize(
    "value",
    [
        {"maxlen": 1, "lowercase": True},
        {"maxlen": True, "lowercase": True},
        {"maxlen": 64.0, "lowercase": True},
        {"maxlen": 64, "lowercase": 1},
        {"maxlen": 64},
        {"maxlen": 64, "lowercase": True, "other": 1},
        [64, True],
        None,
    ],
)
def test_any_other_tokenization_is_refused_in_one_line(value):
    with pytest.raises(WhiteningError) as raised:
        checked_tokenization(value, WhiteningError, "w.npz: 'tokenization'")
    assert str(raised.value).startswith("w.npz: 'tokenization' is %r, expected {}" % (value,))
    assert "\n" not in str(raised.value)

"""`bert_whitening.commands.options`: an argument type refuses a value when it is parsed, naming it."""

import argparse

import pytest

from bert_whitening.commands import options


@pytest.mark.parametrize(
    "kind, text, value",
    [
        (options.positive_int, "3", 3),
        (options.non_negative_int, "0", 0),
        (options.maxlen_int, "2", 2),
        (options.finite_float, "-1.5", -1.5),
        (options.positive_float, "0.5", 0.5),
        (options.int_list, "1,-2,3", [1, -2, 3]),
        (options.seed_list, "0,4", [0, 4]),
        (options.hnsw_int, "0", 0),
        (options.version_int, str(2**63 - 1), 2**63 - 1),
    ],
)
def test_a_value_in_range_is_taken(kind, text, value):
    assert kind(text) == value


@pytest.mark.parametrize(
    "kind, text, said",
    [
        (options.positive_int, "0", "'0' is not a positive integer"),
        (options.positive_int, "x", "'x' is not a positive integer"),
        (options.non_negative_int, "-1", "'-1' is not an integer >= 0"),
        (options.maxlen_int, "1", "'1' is not an integer >= 2 (room for [CLS] and [SEP])"),
        (options.finite_float, "nan", "'nan' is not a finite number"),
        (options.positive_float, "inf", "'inf' is not a finite number > 0"),
        (options.seed_list, "1,-1", "'1,-1' is not a comma-separated list of integers >= 0"),
        (options.hnsw_int, "1", "'1' is not 0 (exact) or an integer 2..512"),
        (options.version_int, str(2**63), "is not an integer 0..2**63-1 (TF Serving's int64 versions)"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_it(kind, text, said):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        kind(text)
    assert said in str(raised.value)

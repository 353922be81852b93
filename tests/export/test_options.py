"""`ExportOptions` (`bert_whitening.export.options`): every refusal in one line naming the value,
before TensorFlow; and the Python API's two ways of giving them (`SentenceEncoder.export`)."""

import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.errors import BertWhiteningError, ExportError
from bert_whitening.export.options import ExportOptions


def test_the_defaults_and_values_are_kept_as_given():
    assert ExportOptions() == ExportOptions(None, False, False, 10, "float32")
    options = ExportOptions(version=3, text=True, overwrite=True, top_k=4, precision="bfloat16")
    assert (options.version, options.text, options.overwrite, options.top_k, options.precision) == (
        3,
        True,
        True,
        4,
        "bfloat16",
    )


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"version": -1}, ExportError, "version must be an integer 0..2**63-1 (TF Serving's int64 versions), got -1"),
        ({"version": "1"}, ExportError, "version must be an integer 0..2**63-1 (TF Serving's int64 versions), got '1'"),
        (
            {"version": True},
            ExportError,
            "version must be an integer 0..2**63-1 (TF Serving's int64 versions), got True",
        ),
        ({"text": "yes"}, BertWhiteningError, "text must be True or False, got str 'yes'"),
        ({"overwrite": 1}, BertWhiteningError, "overwrite must be True or False, got int 1"),
        ({"top_k": 0}, BertWhiteningError, "top_k must be a positive integer, got 0"),
        ({"top_k": 2.0}, BertWhiteningError, "top_k must be a positive integer, got 2.0"),
        ({"precision": "float16"}, BertWhiteningError, "unknown precision 'float16'; choose one of: float32, bfloat16"),
    ],
)
def test_each_value_no_export_can_use_is_refused_when_built(options, error, message):
    with pytest.raises(error) as raised:
        ExportOptions(**options)
    assert str(raised.value) == message


def test_the_export_takes_options_or_keywords_not_both_nor_unknown_ones(tiny_model, tmp_path, monkeypatch):
    """Refused before the model is built or anything written."""
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    encoder = SentenceEncoder.load(tiny_model[0])
    base = str(tmp_path / "served")
    refused = [
        (
            lambda: encoder.export(base, ExportOptions(), text=True),
            "options: give an ExportOptions or its keywords, not both (text given too)",
        ),
        (lambda: encoder.export(base, 1), "options must be an ExportOptions, got int 1"),
        (lambda: encoder.export(base, verison=1), "unknown option 'verison' (ExportOptions takes: version, text"),
        (lambda: encoder.export(base, top_k=0), "top_k must be a positive integer, got 0"),
    ]
    for call, said in refused:
        with pytest.raises(BertWhiteningError) as raised:
            call()
        assert str(raised.value).startswith(said)
    assert not (tmp_path / "served").exists()

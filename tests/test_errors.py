"""`bert_whitening.errors`: one base class, and the line a stopped command says."""

import signal

import pytest

from bert_whitening import errors


@pytest.mark.parametrize(
    "name", ["DataError", "CheckpointError", "WhiteningError", "ExportError", "FlowError", "TrainingError"]
)
def test_every_error_is_a_bert_whitening_error(name):
    assert issubclass(getattr(errors, name), errors.BertWhiteningError)


def test_interrupted_says_nothing_was_written_or_what_was():
    assert errors.interrupted(signal.SIGTERM) == "interrupted by SIGTERM; nothing was written"
    assert errors.interrupted(signal.SIGINT, ["a.npy"]) == "interrupted by SIGINT; a.npy written in full, nothing else"
    assert (
        errors.interrupted(signal.SIGHUP, ["a.npz", "b.npy"])
        == "interrupted by SIGHUP; a.npz and b.npy written in full, nothing else"
    )

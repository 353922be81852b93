"""`FitOptions` and `ReadOptions`: a value no fit or read can use is refused once, in one line
naming the option, whichever entry point it was handed to; and the options given reach the fit
on every path that fits a whitening file (the Python API, ``fit``, ``beam-fit``)."""

import math

import numpy as np
import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.config import EncoderConfig
from bert_whitening.data import ReadOptions
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError, WhiteningError
from bert_whitening.evaluation import EvalOptions, evaluate_tasks
from bert_whitening.retrieval.evaluate import evaluate_retrieval
from bert_whitening.whitening import FitOptions, Whitening, WhiteningStats, fit_whitening

from helpers import SENTENCES, run

#: More sentences than the tiny model's 24 dimensions, so every direction is supported.
CORPUS = [first + second for first in SENTENCES[:8] for second in SENTENCES[8:12]]


@pytest.mark.parametrize(
    "given, message",
    [
        ({"n_components": True}, "n_components must be an integer, got bool True"),
        ({"n_components": 2.5}, "n_components must be an integer, got float 2.5"),
        ({"beta": math.nan}, "beta must be a finite number, got nan"),
        ({"beta": "1"}, "beta must be a finite number, got '1'"),
        ({"gamma": -math.inf}, "gamma must be a finite number, got -inf"),
        ({"gamma": None}, "gamma must be a finite number, got None"),
    ],
)
def test_fit_options_refuse_what_no_fit_can_use_in_one_line(given, message):
    with pytest.raises(WhiteningError) as refused:
        FitOptions(**given)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "given, message",
    [
        ({"format": "csv"}, "unknown input format 'csv'; choose one of: auto, lines, pairs"),
        ({"skip_bad_lines": "yes"}, "skip_bad_lines must be True or False, got str 'yes'"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ],
)
def test_read_options_refuse_what_no_read_can_use_in_one_line(given, message):
    with pytest.raises(BertWhiteningError) as refused:
        ReadOptions(**given)
    assert str(refused.value) == message


def test_options_are_plain_numbers_whatever_numbers_they_were_given():
    """numpy scalars become int and float, which the whitening file's JSON metadata can hold."""
    options = FitOptions(np.int64(5), np.float32(0.5), np.float64(0))
    assert [type(value) for value in (options.n_components, options.beta, options.gamma)] == [int, float, float]


@pytest.mark.parametrize(
    "path",
    ["fit_whitening", "SentenceEncoder.fit", "evaluate_tasks", "evaluate_retrieval"],
)
def test_every_entry_point_refuses_a_non_finite_beta_before_reading_anything(tiny_model, tmp_path, path, monkeypatch):
    """Nothing exists to be read (no task files, no input file) and building the model fails
    here: the refusal is the option's, made first."""
    monkeypatch.setattr(SentenceEncoder, "_pooled_encoder", lambda self: pytest.fail("the model was built"))
    spec = EncoderConfig(tiny_model[0])
    missing = str(tmp_path / "missing.txt")
    call = {
        "fit_whitening": lambda: fit_whitening(WhiteningStats().update(np.eye(3)), beta=math.nan),
        "SentenceEncoder.fit": lambda: SentenceEncoder(spec).fit(files=[missing], beta=math.nan),
        "evaluate_tasks": lambda: evaluate_tasks(
            spec, ["NOTHING"], EvalOptions(directory=str(tmp_path), betas=[1.0, math.nan])
        ),
        "evaluate_retrieval": lambda: evaluate_retrieval(
            spec, ["NOTHING"], EvalOptions(directory=str(tmp_path), betas=[math.nan])
        ),
    }[path]
    with pytest.raises(WhiteningError) as refused:
        call()
    assert str(refused.value) == "beta must be a finite number, got nan"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(sentence + "\n" for sentence in CORPUS), encoding="utf-8")
    return path


def _fitted(path, model, corpus, output):
    """The whitening of ``corpus`` fitted with n_components 5, beta 0 and gamma 0 by ``path``."""
    if path == "SentenceEncoder.fit":
        return SentenceEncoder.load(model).fit(files=[str(corpus)], n_components=5, beta=0, gamma=0)
    options = ["--n-components", 5, "--beta", 0, "--gamma", 0, "--model", model, "--output", output]
    argv = ["fit", *options, corpus] if path == "fit" else ["beam-fit", *options, "--input", corpus]
    assert run(*argv) == 0
    return Whitening.load(str(output))


@pytest.mark.parametrize("path", ["SentenceEncoder.fit", "fit", "beam-fit"])
def test_the_options_given_reach_the_fit_on_every_path(tiny_model, encoders, corpus, tmp_path, path):
    """beta 0 leaves the mean in Sigma and out of the bias, gamma 0 leaves the kernel's columns
    of unit norm: each differs from the defaults' whitening of the same vectors."""
    fitted = _fitted(path, tiny_model[0], corpus, tmp_path / "w.npz")
    stats = WhiteningStats().update(encode(encoders["first-last-avg"], CORPUS))
    expected = fit_whitening(stats, n_components=5, beta=0, gamma=0)
    assert (fitted.n_components, fitted.beta, fitted.gamma) == (5, 0.0, 0.0)
    np.testing.assert_allclose(fitted.eigenvalues, expected.eigenvalues, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(fitted.bias, expected.bias, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(fitted.kernel, axis=0), 1.0, rtol=1e-9)
    defaults = fit_whitening(stats)
    assert not np.allclose(defaults.eigenvalues, expected.eigenvalues, rtol=1e-2)
    assert not np.allclose(defaults.bias, expected.bias, atol=1e-3)


def test_a_fit_takes_its_options_as_an_object_or_as_keywords_not_both(tiny_model, monkeypatch):
    """The command line passes its `FitOptions` and `ReadOptions` through; the Python API takes
    them or their fields, and refuses a mixture, an unknown keyword, or another object, before
    the model is built."""
    monkeypatch.setattr(SentenceEncoder, "_pooled_encoder", lambda self: pytest.fail("the model was built"))
    encoder = SentenceEncoder(EncoderConfig(tiny_model[0]))
    stats = WhiteningStats().update(np.eye(3))
    refused = [
        (lambda: fit_whitening(stats, 2), "options must be a FitOptions, got int 2"),
        (lambda: fit_whitening(stats, FitOptions(), beta=0.5), "options: give a FitOptions or its keywords, not both"),
        (
            lambda: fit_whitening(stats, bta=0.5),
            "unknown option 'bta' (FitOptions takes: n_components, beta, gamma, codes)",
        ),
        (
            lambda: encoder.fit(SENTENCES, beat=0),
            "unknown option 'beat' (fit takes: n_components, beta, gamma, codes, format, skip_bad_lines, batch_size)",
        ),
        (lambda: encoder.fit(SENTENCES, options=FitOptions(), gamma=0), "options: give a FitOptions or its keywords"),
        (lambda: encoder.fit(SENTENCES, read=ReadOptions(), batch_size=8), "read: give a ReadOptions or its keywords"),
        (lambda: encoder.fit(SENTENCES, read={"batch_size": 8}), "read must be a ReadOptions, got dict"),
        (lambda: encoder.fit_flow(SENTENCES, read=ReadOptions(), format="lines"), "read: give a ReadOptions or"),
    ]
    for call, said in refused:
        with pytest.raises(BertWhiteningError) as raised:
            call()
        assert str(raised.value).startswith(said)
    whitening = fit_whitening(stats, FitOptions(2, 0.5))
    assert (whitening.n_components, whitening.beta) == (2, 0.5)

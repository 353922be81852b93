"""`commands/base.py`: the encoder a command's options describe, the refusals made from the
model's configuration before any sentence is read, and Beam's missing-package line."""

import argparse
import builtins

import numpy as np
import pytest

from bert_whitening.commands.base import encoder_config, load_beam
from bert_whitening.errors import BertWhiteningError
from bert_whitening.whitening import WhiteningStats, fit_whitening


def options(model, **given):
    fields = dict(
        model=model,
        model_type="bert",
        pooling="cls",
        maxlen=16,
        cased=False,
        whitening=None,
        n_components=None,
        no_normalize=False,
        allow_rank_deficient=False,
        flow=None,
    )
    return argparse.Namespace(**{**fields, **given})


@pytest.fixture
def whitening_file(tiny_model, tmp_path):
    vectors = np.random.default_rng(0).normal(size=(80, 24))
    path = tmp_path / "w.npz"
    fit_whitening(WhiteningStats().update(vectors), pooling="cls", n_components=8).save(str(path))
    return str(path)


def test_a_whitened_command_takes_the_whitening_and_normalises_unless_told(tiny_model, whitening_file):
    config = encoder_config(options(tiny_model[0], whitening=whitening_file, n_components=4), whitened=True)
    assert config.whitening is not None and config.components == 4 and config.normalize
    assert config.whitening_path == whitening_file and config.lowercase
    unnormalised = encoder_config(options(tiny_model[0], whitening=whitening_file, no_normalize=True), whitened=True)
    assert unnormalised.components == 8 and not unnormalised.normalize


def test_an_unwhitened_command_ignores_the_whitening_options(tiny_model, whitening_file):
    config = encoder_config(options(tiny_model[0], whitening=whitening_file, n_components=4, cased=True))
    assert config.whitening is None and config.n_components is None and not config.normalize
    assert config.components == 0 and not config.lowercase


def test_n_components_above_the_hidden_size_is_refused_from_the_configuration(tiny_model):
    with pytest.raises(BertWhiteningError, match=r"^n_components 30 is larger than the model's hidden size 24"):
        encoder_config(options(tiny_model[0], n_components=[8, 30], method=["whitening"]))
    config = encoder_config(options(tiny_model[0], n_components=[30], method=["flow"]))  # a flow keeps every one
    assert config.components == 0


def test_beam_missing_is_one_line_saying_how_to_install_it(monkeypatch):
    real_import = builtins.__import__

    def without_beam(name, *arguments, **keywords):
        if name == "bert_whitening" and "beam" in (arguments[2] or ()):
            raise ImportError("No module named 'apache_beam'")
        return real_import(name, *arguments, **keywords)

    monkeypatch.setattr(builtins, "__import__", without_beam)
    with pytest.raises(BertWhiteningError, match=r"^the Beam commands need apache-beam \(pip install"):
        load_beam()

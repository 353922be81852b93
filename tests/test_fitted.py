"""`bert_whitening.sentence_encoder.load_config`: an encoder record with its whitening read from a file,
the pooling taken from what the whitening was fitted with, and a file of another model refused."""

import numpy as np
import pytest

from bert_whitening.errors import WhiteningError
from bert_whitening.names import DEFAULT_POOLING
from bert_whitening.sentence_encoder import load_config
from bert_whitening.whitening import WhiteningStats, fit_whitening


def whitening_file(path, dim, pooling):
    vectors = np.random.default_rng(0).normal(size=(4 * dim, dim))
    fit_whitening(WhiteningStats().update(vectors), n_components=4, pooling=pooling).save(path)
    return str(path)


def test_a_whitening_file_is_read_and_recorded_with_its_pooling(tiny_model, tmp_path):
    path = whitening_file(tmp_path / "w.npz", 24, "cls")
    config = load_config(model=tiny_model[0], whitening=path)
    assert config.whitening_path == path and config.whitening.n_components == 4
    assert config.pooling == "cls"  # the whitening's, when none is given
    assert load_config(model=tiny_model[0], whitening=path, pooling="last-avg").pooling == "last-avg"
    assert config.model_files.directory == load_config(model=tiny_model[0]).files.directory


def test_without_a_whitening_the_default_pooling_is_taken(tiny_model):
    config = load_config(model=tiny_model[0])
    assert config.pooling == DEFAULT_POOLING and config.whitening is None and config.whitening_path is None


def test_a_whitening_of_another_width_is_refused_as_it_is_read(tiny_model, tmp_path):
    path = whitening_file(tmp_path / "w.npz", 8, "cls")
    with pytest.raises(WhiteningError, match="8"):
        load_config(model=tiny_model[0], whitening=path)

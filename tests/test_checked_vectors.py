"""One check of produced vectors (`bert_whitening.whitening.check_vectors`) before any writer
writes them: ``encode``, ``SentenceEncoder.encode``, ``index``, ``beam-encode`` (in the worker)
and the export's verification refuse non-finite vectors, and unit-norm outputs that are not, in
one line naming the source, the row and the value; nothing is written."""

import dataclasses
import os

import numpy as np
import pytest

from bert_whitening.checkpoints import find_model
from bert_whitening.errors import BertWhiteningError
from bert_whitening.whitening import check_vectors

from helpers import SENTENCES, here, refused


@pytest.fixture(scope="module")
def broken(tmp_path_factory, tiny_model, whitened):
    """The tiny model and a whitening of it whose mean is too large for float32: the whitening
    Dense gives -inf, which no arithmetic later turns back into a direction."""
    directory = tmp_path_factory.mktemp("vectors")
    whitening = whitened.whitening
    mean = whitening.mean + 1e300
    path = directory / "huge-mean.npz"
    identity = find_model(tiny_model[0]).identity("bert")
    dataclasses.replace(whitening, mean=mean, bias=-mean, model_identity=identity).save(str(path))
    sentences = directory / "sentences.txt"
    sentences.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    return {"model": tiny_model[0], "whitening": path, "sentences": sentences}


def encoder_args(broken):
    return ["--model", broken["model"], "--whitening", broken["whitening"]]


@pytest.mark.parametrize("normalize", [[], ["--no-normalize"]], ids=["normalised", "not-normalised"])
def test_encode_refuses_non_finite_vectors_and_writes_nothing(broken, tmp_path, normalize):
    output = tmp_path / "v.npy"
    result = here("encode", *encoder_args(broken), *normalize, "--output", output, broken["sentences"])
    refused(result, "%s: row 0 (0-based): the vector holds" % broken["sentences"], "column 0")
    assert os.listdir(tmp_path) == []


def test_the_api_refuses_non_finite_vectors(broken):
    from bert_whitening import SentenceEncoder

    encoder = SentenceEncoder.load(broken["model"], whitening=str(broken["whitening"]))
    with pytest.raises(BertWhiteningError, match=r"^the sentences: row 0 \(0-based\): the vector holds -?inf"):
        encoder.encode(SENTENCES)


def test_index_refuses_non_finite_vectors_naming_file_and_line(broken, tmp_path):
    result = here("index", *encoder_args(broken), "--output", tmp_path / "index", broken["sentences"])
    refused(result, "%s:1: the vector holds" % broken["sentences"])
    assert os.listdir(tmp_path) == []


def test_beam_encode_refuses_non_finite_vectors_in_the_worker(broken, tmp_path):
    prefix = tmp_path / "out" / "vectors"
    result = here("beam-encode", *encoder_args(broken), "--input", broken["sentences"], "--output", prefix)
    refused(result, "%s:" % broken["sentences"], "the vector holds")
    assert [name for _, _, names in os.walk(tmp_path) for name in names] == []


def test_export_refuses_when_its_own_reference_vectors_are_not_numbers(broken, tmp_path):
    """The verification's reference (the in-memory encoder) is checked, not only compared: two
    equal infinities differ by nan, which said nothing of where the vectors went wrong."""
    result = here("export", *encoder_args(broken), "--output", tmp_path / "served")
    refused(result, "the Keras encoder's vectors of the verification sentences: row", "the vector holds")
    assert os.listdir(tmp_path) == []


def test_check_vectors_names_the_first_bad_row_and_its_value():
    unit = np.eye(3, dtype=np.float32)
    assert check_vectors(unit, "x") is unit
    raw = unit * 5
    assert check_vectors(raw, "x", normalized=False) is raw  # unnormalised vectors need be finite only
    longer = unit.copy()
    longer[1] *= 5
    with pytest.raises(BertWhiteningError, match=r"^x: row 11 \(0-based\): the vector has norm 5 where"):
        check_vectors(longer, "x", start=10)
    zero = unit.copy()
    zero[2] = 0
    with pytest.raises(BertWhiteningError, match=r"^a.txt:7: the vector has norm 0 .*\(a zero vector"):
        check_vectors(zero, "x", keys=[("a.txt", 5), ("a.txt", 6), ("a.txt", 7)])
    nan = unit.copy()
    nan[1, 2] = np.nan
    for normalized in (True, False):
        with pytest.raises(BertWhiteningError, match=r"^x: row 1 \(0-based\): the vector holds nan \(column 2\)"):
            check_vectors(nan, "x", normalized=normalized)

"""One check of produced vectors (`bert_whitening.vectors.check_vectors`) before any writer
writes them: ``encode``, ``SentenceEncoder.encode``, ``index``, ``beam-encode`` (in the worker)
and the export's verification refuse non-finite vectors, and unit-norm outputs that are not, in
one line naming the source, the row and the value; nothing is written."""

import dataclasses
import os
import re
import warnings

import numpy as np
import pytest

from bert_whitening.checkpoints import find_model
from bert_whitening.errors import BertWhiteningError
from bert_whitening.vectors import check_vectors

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


def said(action):
    with pytest.raises(BertWhiteningError) as raised:
        action()
    return str(raised.value)


def test_check_vectors_blames_only_what_computed_the_vectors():
    """The stages that computed the vectors are blamed, and only those: a model alone is not a
    whitening or flow, and numbers a caller handed in were computed by nothing here."""
    nan = np.eye(3, dtype=np.float32)
    nan[1, 2] = np.nan
    assert said(lambda: check_vectors(nan, "x")) == "x: row 1 (0-based): the vector holds nan (column 2)"
    assert said(lambda: check_vectors(nan, "x", stages=("model",))) == (
        "x: row 1 (0-based): the vector holds nan (column 2): the model gave a non-number"
    )
    assert said(lambda: check_vectors(nan, "x", False, stages=("model", "whitening"))) == (
        "x: row 1 (0-based): the vector holds nan (column 2): the model or the whitening gave a non-number"
    )
    zero = np.eye(3, dtype=np.float32)
    zero[2] = 0
    prefix = "x: row 2 (0-based): the vector has norm 0 where L2-normalised vectors have 1"
    assert said(lambda: check_vectors(zero, "x")) == prefix + " (a zero vector)"
    assert said(lambda: check_vectors(zero, "x", stages=("model",))) == prefix + " (a zero vector: the model gave it)"
    for last in ("whitening", "flow"):
        assert said(lambda stages=("model", last): check_vectors(zero, "x", stages=stages)) == (
            prefix + " (a zero vector: the %s maps it to 0)" % last
        )


@pytest.mark.parametrize("value, norm", [(1e-300, "2e-300"), (1e200, "2e+200"), (1e40, "2e+40")])
def test_a_row_of_tiny_or_huge_numbers_is_given_its_norm_not_zero_or_inf(value, norm):
    """Squared, 1e-300 underflows to 0 and 1e200 overflows: the norm is taken of the row scaled by
    its largest entry, and a row is zero only when its entries are."""
    vectors = np.eye(4)
    vectors[1] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        message = said(lambda: check_vectors(vectors, "x"))
    assert message == "x: row 1 (0-based): the vector has norm %s where L2-normalised vectors have 1" % norm


@pytest.mark.parametrize("value, norm", [(1e40, "2e+40"), (1e-300, "2e-300")])
def test_an_index_checks_the_callers_vectors_before_its_float32(tmp_path, value, norm):
    """``IndexWriter.add`` cast to float32 first: a float64 row of 1e40 became inf, reported as
    'the model, whitening or flow gave a non-number', and one of 1e-300 a zero vector 'the
    whitening or flow maps to 0'. Complex or string vectors were cast too, or parsed."""
    from bert_whitening.retrieval.index_directory import IndexWriter

    record = {"model": {"name": "m", "hidden_size": 4}, "n_components": 0}
    vectors = np.eye(4)
    vectors[2] = value
    keys = [("v.npy", row) for row in range(1, 5)]
    with pytest.raises(BertWhiteningError) as raised:
        with IndexWriter(str(tmp_path / "index"), record, 4, source="v.npy") as writer:
            writer.add(vectors, keys)
    assert str(raised.value) == "v.npy:3: the vector has norm %s where L2-normalised vectors have 1" % norm
    for bad, kind in ((np.eye(4) + 0j, "complex128"), (np.eye(4).astype(str), "<U32")):
        with pytest.raises(BertWhiteningError, match=r"^v.npy: holds %s, expected vectors of real" % kind):
            with IndexWriter(str(tmp_path / "index"), record, 4, source="v.npy") as writer:
                writer.add(bad, keys)
    assert os.listdir(tmp_path) == []


def edited_model(tmp_path_factory, name, edit):
    """The tiny model written with ``edit(weights)`` applied."""
    from bert_whitening.checkpoints.google import write_checkpoint

    from helpers import TINY_CONFIG, TINY_VOCAB, random_weights

    weights = random_weights(TINY_CONFIG)
    edit(weights)
    directory = str(tmp_path_factory.mktemp("models") / name)
    write_checkpoint(directory, TINY_CONFIG, weights, TINY_VOCAB)
    return directory


@pytest.fixture(scope="module")
def silent_model(tmp_path_factory):
    """The tiny model with its last layer's LayerNorm zeroed: every last-layer vector is 0."""
    from helpers import TINY_CONFIG

    def silence(weights):
        for name in ("gamma", "beta"):
            key = "bert/encoder/layer_%d/output/LayerNorm/%s" % (TINY_CONFIG["num_hidden_layers"] - 1, name)
            weights[key] = np.zeros_like(weights[key])

    return edited_model(tmp_path_factory, "silent", silence)


@pytest.fixture(scope="module")
def cat_model(tmp_path_factory):
    """The tiny model whose embedding of 猫 is NaN: a sentence holding it has a NaN vector."""
    from helpers import TINY_VOCAB

    def poison(weights):
        weights["bert/embeddings/word_embeddings"][TINY_VOCAB.index("猫")] = np.nan

    return edited_model(tmp_path_factory, "cat", poison)


@pytest.mark.parametrize(
    "content, line",
    [("今天天气很好\n我们在北京\n猫和狗在跑\n", 3), ("今天天气很好\t我们在北京\t1\n她是一个好人\t猫和狗在跑\t0\n", 2)],
    ids=["sentences", "pairs"],
)
def test_a_fit_on_files_names_the_file_and_line_of_a_vector_that_is_not_a_number(
    cat_model, tmp_path, monkeypatch, content, line
):
    """It said 'vector 2 (0-based, in input order) contains NaN or inf', a row of the
    accumulator, with no file, line or cause. The line is found in a later chunk too."""
    from bert_whitening import SentenceEncoder, encoding

    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 2)

    path = tmp_path / "fit.txt"
    path.write_text(content, encoding="utf-8")
    said = "%s:%d: the vector holds nan (column 0): the model gave a non-number" % (path, line)
    with pytest.raises(BertWhiteningError, match="^%s$" % re.escape(said)):
        SentenceEncoder.load(cat_model).fit(files=[str(path)])
    refused(here("fit", "--model", cat_model, "--output", tmp_path / "w.npz", path), said)
    assert os.listdir(tmp_path) == ["fit.txt"]


def test_a_fit_on_sentences_names_the_row_of_a_vector_that_is_not_a_number(cat_model, monkeypatch):
    """Its row among all the sentences, in a later chunk too (of 3 sentences here)."""
    from bert_whitening import SentenceEncoder, encoding

    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 3)
    with pytest.raises(BertWhiteningError) as raised:
        SentenceEncoder.load(cat_model).fit(SENTENCES)
    assert str(raised.value) == (
        "the sentences: row %d (0-based): the vector holds nan (column 0): the model gave a non-number"
        % SENTENCES.index("猫和狗在跑")
    )


def test_a_model_that_gives_zero_vectors_is_blamed_not_a_whitening_there_is_not(silent_model):
    from bert_whitening import SentenceEncoder

    encoder = SentenceEncoder.load(silent_model, pooling="last-avg")
    with pytest.raises(BertWhiteningError) as raised:
        encoder.encode(SENTENCES[:2])
    assert str(raised.value) == (
        "the sentences: row 0 (0-based): the vector has norm 0 where L2-normalised vectors have 1 "
        "(a zero vector: the model gave it)"
    )

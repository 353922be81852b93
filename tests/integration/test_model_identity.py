"""A model's identity is its content (vocabulary and weights digests, sizes, type), and every
fitted file and record is compared with the model by one check (`config.check_same_model`):
a whitening, a flow, an index or a saved record made with the base model is refused for a
fine-tuned copy of it (same vocabulary and sizes, other weights), on every path; a renamed copy
of a model is the same model; crafted identity fields are refused."""

import dataclasses
import logging
import os
import shutil

import numpy as np
import pytest

from bert_whitening.checkpoints import find_model
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.config import EncoderConfig
from bert_whitening.errors import BertWhiteningError

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, here, refused


@pytest.fixture(scope="module")
def copies(tiny_model, tmp_path_factory):
    """``(renamed, tuned)``: a copy of the tiny model under another name, and a copy whose one
    weight moved (as fine-tuning leaves the vocabulary and sizes, and changes the weights)."""
    directory, weights = tiny_model
    root = tmp_path_factory.mktemp("copies")
    renamed = str(root / "renamed_bert")
    shutil.copytree(directory, renamed)
    tuned_weights = dict(weights)
    name = "bert/encoder/layer_0/output/dense/bias"
    tuned_weights[name] = weights[name] + np.float32(0.01)
    tuned = str(root / "tuned_bert")
    write_checkpoint(tuned, TINY_CONFIG, tuned_weights, TINY_VOCAB)
    return renamed, tuned


@pytest.fixture(scope="module")
def fitted_files(tiny_model, whitened, tmp_path_factory):
    """A whitening file fitted with the tiny model (as `fit` records it), and a flow."""
    from bert_whitening.flow import Flow

    identity = find_model(tiny_model[0]).identity("bert")
    path = str(tmp_path_factory.mktemp("fitted") / "w.npz")
    dataclasses.replace(whitened.whitening, model_identity=identity).save(path)
    flow = Flow(24, {"n_levels": 1, "depth": 1, "coupling_width": 8})
    flow.pooling, flow.model_identity = "first-last-avg", identity
    return path, flow


def test_the_identity_is_the_content_not_the_directory(tiny_model, copies):
    renamed, tuned = copies
    base = find_model(tiny_model[0]).identity("bert")
    assert len(base["weights_sha256"]) == 64
    same = find_model(renamed).identity("bert")
    assert same.pop("name") == "renamed_bert" and same == {k: v for k, v in base.items() if k != "name"}
    other = find_model(tuned).identity("bert")
    assert [key for key in base if key != "name" and base[key] != other[key]] == ["weights_sha256"]
    assert {key: base[key] for key in ("format", "type", "hidden_size", "num_hidden_layers")} == {
        "format": "google",
        "type": "bert",
        "hidden_size": TINY_CONFIG["hidden_size"],
        "num_hidden_layers": TINY_CONFIG["num_hidden_layers"],
    }


def test_a_configuration_rewritten_in_another_layout_is_the_same_model(tiny_model, tmp_path):
    """Keys in another order, other indentation: the configuration read is the same, and so is
    its digest (a tool that rewrites the file made every fitted file another model's)."""
    import json

    copy = tmp_path / "rewritten_bert"
    shutil.copytree(tiny_model[0], copy)
    config = json.loads((copy / "bert_config.json").read_text())
    (copy / "bert_config.json").write_text(json.dumps(dict(reversed(list(config.items()))), indent=4))
    base, same = (find_model(str(directory)).identity("bert") for directory in (tiny_model[0], copy))
    assert same.pop("name") == "rewritten_bert" and same == {k: v for k, v in base.items() if k != "name"}


def test_the_weights_digest_covers_the_checkpoint_index_and_a_file_rewritten_in_place(tiny_model, tmp_path):
    """The index says each variable's shape: the same data bytes under another shape (a kernel
    read transposed) are another model. A weight file rewritten in place (same inode and size)
    is digested again, not taken from the process's memory of it."""
    _, weights = tiny_model
    name = "bert/encoder/layer_0/intermediate/dense/kernel"
    reshaped = str(tmp_path / "reshaped_bert")
    write_checkpoint(reshaped, TINY_CONFIG, {**weights, name: weights[name].reshape(48, 24)}, TINY_VOCAB)
    base, other = find_model(tiny_model[0]), find_model(reshaped)
    assert open(base.weight_files[-1], "rb").read() == open(other.weight_files[-1], "rb").read()  # same data
    assert base.weights_sha256 != other.weights_sha256
    before = other.weights_sha256
    with open(other.weight_files[-1], "r+b") as stream:
        first = stream.read(1)
        stream.seek(0)
        stream.write(bytes([first[0] ^ 0xFF]))
    os.utime(other.weight_files[-1], ns=(1, 1))  # another modification time, whatever the clock's resolution
    assert find_model(reshaped).weights_sha256 != before


@pytest.mark.parametrize("edit", [{"hidden_act": "relu"}, {"num_attention_heads": 2}])
def test_a_file_fitted_with_the_base_model_is_refused_once_its_configuration_was_edited(
    tiny_model, fitted_files, tmp_path, edit
):
    """Same weights and vocabulary under another activation or number of heads: other vectors,
    so another model."""
    import json

    edited = str(tmp_path / "edited_bert")
    shutil.copytree(tiny_model[0], edited)
    config_path = tmp_path / "edited_bert" / "bert_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), **edit}))
    base, other = (find_model(directory).identity("bert") for directory in (tiny_model[0], edited))
    assert [key for key in base if key != "name" and base[key] != other[key]] == ["config_sha256"]
    from bert_whitening.whitening import Whitening

    path, flow = fitted_files
    with pytest.raises(BertWhiteningError, match="its configurations differ from edited_bert's"):
        EncoderConfig(edited, whitening=Whitening.load(path)).check()
    with pytest.raises(BertWhiteningError, match="its configurations differ"):
        EncoderConfig(edited, flow=flow).check()


def whitening_paths(tuned, path, flow, tmp_path):
    """Each way a whitening or a flow meets a model, as a callable that raises on refusal."""
    from bert_whitening import SentenceEncoder
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.whitening import Whitening

    whitening = Whitening.load(path)

    def command(*argv):
        result = here(*argv)
        if result.returncode:
            raise BertWhiteningError(refused(result))

    return {
        "with_whitening": lambda: with_whitening(build_encoder(tuned), whitening, 8),
        "EncoderConfig.check": lambda: EncoderConfig(tuned, whitening=whitening).check(),
        "flow": lambda: EncoderConfig(tuned, flow=flow).check(),
        "SentenceEncoder.load": lambda: SentenceEncoder.load(tuned, whitening=path),
        "encode": lambda: command("encode", "--model", tuned, "--whitening", path, "--output", tmp_path / "v.npy", "-"),
        "export": lambda: command("export", "--model", tuned, "--whitening", path, "--output", tmp_path / "served"),
    }


@pytest.mark.parametrize(
    "way", ["with_whitening", "EncoderConfig.check", "flow", "SentenceEncoder.load", "encode", "export"]
)
def test_a_file_fitted_with_the_base_model_is_refused_for_a_tuned_copy(copies, fitted_files, tmp_path, way):
    ways = whitening_paths(copies[1], *fitted_files, tmp_path)
    with pytest.raises(BertWhiteningError, match="made with another model .*its weight files differ from tuned_bert's"):
        ways[way]()
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "served").exists()


def test_a_renamed_copy_takes_the_files_of_its_original_without_a_word(copies, fitted_files, tmp_path, caplog):
    path, flow = fitted_files
    sentences = tmp_path / "s.txt"
    sentences.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    result = here("encode", "--model", copies[0], "--whitening", path, "--output", tmp_path / "v.npy", sentences)
    assert result.returncode == 0 and b"WARNING" not in result.stderr, result.stderr
    assert EncoderConfig(copies[0], flow=flow).components == 0


def test_an_index_of_the_base_model_is_refused_for_a_tuned_copy(tiny_model, copies, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert here("index", "--model", tiny_model[0], "--output", tmp_path / "index", corpus).returncode == 0
    result = here("search", "--index", tmp_path / "index", "--model", copies[1], SENTENCES[0])
    refused(result, "made with another model", "weight files differ from tuned_bert's")
    renamed = here("search", "--index", tmp_path / "index", "--model", copies[0], SENTENCES[0])
    assert renamed.returncode == 0, renamed.stderr


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda i: i.update(weights_sha256="abc"), "'weights_sha256' is 'abc'"),
        (lambda i: i.update(vocab_sha256="Z" * 64), "'vocab_sha256' is 'ZZZ"),
        (lambda i: i.update(hidden_size=True), "'hidden_size' is True"),
        (lambda i: i.update(num_hidden_layers=-2), "'num_hidden_layers' is -2"),
        (lambda i: i.update(num_hidden_layers=129), "'num_hidden_layers' is 129, more than any model has (128)"),
        (lambda i: i.update(type="gpt"), "'type' is 'gpt'"),
        (lambda i: i.pop("vocab_sha256"), "has no 'vocab_sha256'"),
    ],
)
def test_crafted_identity_fields_of_a_whitening_are_refused(tiny_model, whitened, tmp_path, edit, fragment):
    identity = find_model(tiny_model[0]).identity("bert")
    edit(identity)
    path = tmp_path / "w.npz"
    dataclasses.replace(whitened.whitening, model_identity=identity).save(str(path))
    result = here("encode", "--model", tiny_model[0], "--whitening", path, "--output", tmp_path / "v.npy", "-")
    refused(result, "the whitening: the model identity", fragment)
    with pytest.raises(BertWhiteningError, match="the model identity"):
        EncoderConfig(tiny_model[0], whitening=dataclasses.replace(whitened.whitening, model_identity=identity)).check()


def test_a_record_without_a_weights_digest_is_compared_without_it_and_said(tiny_model, whitened, caplog):
    """Files of earlier versions record no weights digest: they are still read, with a warning."""
    identity = find_model(tiny_model[0]).identity("bert")
    del identity["weights_sha256"]
    legacy = dataclasses.replace(whitened.whitening, model_identity=identity)
    with caplog.at_level(logging.WARNING):
        assert EncoderConfig(tiny_model[0], whitening=legacy).components == legacy.components(None)
    assert "records no digest of the model's weights" in caplog.text
    identity["vocab_sha256"] = "0" * 64
    with pytest.raises(BertWhiteningError, match="its vocabularies differ"):
        EncoderConfig(tiny_model[0], whitening=dataclasses.replace(legacy, model_identity=identity)).check()


def test_a_whitening_that_records_no_model_is_applied_with_a_warning(tiny_model, whitened, caplog):
    """Fitted on vectors given as numbers (or its record blanked by hand): nothing can be
    compared, and the user is told so rather than nothing."""
    unrecorded = dataclasses.replace(whitened.whitening, model_identity={}, pooling="")
    with caplog.at_level(logging.WARNING):
        assert EncoderConfig(tiny_model[0], whitening=unrecorded).components == unrecorded.components(None)
    assert "the whitening records no model and no pooling: it was fitted on vectors given as numbers" in caplog.text
    assert "came from tiny_bert" in caplog.text


def test_a_whitening_that_records_a_model_but_no_pooling_is_refused(tiny_model, whitened):
    """Blanking the recorded pooling skipped the pooling check in silence: a fit from a model
    records both, so a file with one and not the other was edited."""
    identity = find_model(tiny_model[0]).identity("bert")
    blanked = dataclasses.replace(whitened.whitening, model_identity=identity, pooling="")
    with pytest.raises(
        BertWhiteningError, match="the whitening records the model tiny_bert but no pooling: it was edited"
    ):
        EncoderConfig(tiny_model[0], whitening=blanked, pooling="cls").check()


def test_a_copy_in_another_format_is_refused_saying_so(tiny_model):
    """A whitening fitted with a Hugging Face model is refused for its `convert-hf` copy (other
    weight files): the refusal said only that the weights differ, which read as a wrong model."""
    from bert_whitening.config import check_same_model

    google = find_model(tiny_model[0]).identity("bert")
    converted_from = {**google, "format": "huggingface", "weights_sha256": "0" * 64}
    with pytest.raises(BertWhiteningError) as refusal:
        check_same_model("the whitening", converted_from, google)
    assert str(refusal.value).endswith(
        "its weight files differ from tiny_bert's): refused; a copy in another format (huggingface, not google) "
        "counts as another model: fit or build it again with this one"
    )
    with pytest.raises(BertWhiteningError) as refusal:
        check_same_model("the whitening", {**google, "weights_sha256": "0" * 64}, google)
    assert str(refusal.value).endswith("its weight files differ from tiny_bert's): refused")

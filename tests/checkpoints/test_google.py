"""Google-format checkpoints: missing, unreadable, damaged or replaced files, and unused variables."""

import os
import re
import shutil

import numpy as np
import pytest
from test_models import tiny_checkpoint

from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.encoding import (
    encode,
)
from bert_whitening.models import build_encoder

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, random_weights


@pytest.mark.parametrize(
    "missing", ["bert_config.json", "vocab.txt", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"]
)
def test_missing_checkpoint_files_are_named(model_copy, missing):
    os.remove(os.path.join(model_copy, missing))
    with pytest.raises(CheckpointError, match=missing.replace(".", r"\.")):
        build_encoder(model_copy)


def test_unreadable_file_and_missing_directory_are_named(model_copy, tmp_path):
    with pytest.raises(CheckpointError, match="nowhere does not exist"):
        build_encoder(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="^model directory /dev/zero is not a directory$"):
        build_encoder("/dev/zero")
    with open(os.path.join(model_copy, "bert_config.json"), "w") as stream:
        stream.write("{not json")
    with pytest.raises(CheckpointError, match="bert_config.json is not valid JSON"):
        build_encoder(model_copy)


def test_a_damaged_checkpoint_index_is_named(model_copy):
    with open(os.path.join(model_copy, "bert_model.ckpt.index"), "r+b") as stream:
        stream.truncate(100)
    with pytest.raises(
        CheckpointError,
        match=r"copy/bert_model.ckpt.index: cannot read the "
        r"checkpoint index",
    ):
        build_encoder(model_copy)


def test_heads_optimizer_slots_and_step_of_a_training_checkpoint_are_left_unused(tmp_path, encoders):
    rng = np.random.default_rng(5)
    heads = {
        "cls/predictions/transform/dense/kernel": rng.normal(size=(24, 24)),
        "cls/predictions/output_bias": rng.normal(size=TINY_CONFIG["vocab_size"]),
        "cls/seq_relationship/output_weights": rng.normal(size=(2, 24)),
    }
    slots = {
        "%s/%s" % (name, slot): np.zeros_like(value)
        for name, value in {**random_weights(TINY_CONFIG), **heads}.items()
        for slot in ("adam_m", "adam_v", "lamb_m", "lamb_v")
    }
    directory = tiny_checkpoint(tmp_path, extra={**heads, **slots, "global_step": np.int64(1000)})
    encoder = build_encoder(directory, pooling="cls")  # and the pooler is unused too
    np.testing.assert_array_equal(encode(encoder, SENTENCES), encode(encoders["cls"], SENTENCES))


def test_a_checkpoint_read_that_fails_while_it_loads_is_one_line_naming_the_file(tiny_model, monkeypatch):
    """What the checks before a build cannot see (the data cut short while it loads, a checksum
    that does not match) is TensorFlow's reader's first line, naming the file, as a
    `CheckpointError`; any other IndexError is a bug, raised as it is."""
    from bert_whitening.backend import tf
    from bert_whitening.checkpoints import CheckedVariables

    def failing(error):
        def read(variables, name):
            raise error

        return read

    weights_path = find_model(tiny_model[0]).weights_path
    for error, said in (
        (
            IndexError("Read less bytes than requested"),
            "the checkpoint data is truncated (Read less bytes than requested)",
        ),
        (
            tf.errors.DataLossError(None, None, "Checksum does not match\n\t [[node RestoreV2]]"),
            "Checksum does not match",
        ),
    ):
        monkeypatch.setattr(CheckedVariables, "__getitem__", failing(error))
        with pytest.raises(CheckpointError) as refused:
            build_encoder(tiny_model[0], pooling="cls")
        assert str(refused.value) == "%s: %s" % (weights_path, said)
    monkeypatch.setattr(CheckedVariables, "__getitem__", failing(IndexError("list index out of range")))
    with pytest.raises(IndexError, match="^list index out of range$"):
        build_encoder(tiny_model[0], pooling="cls")


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
@pytest.mark.parametrize("model", ["google", "huggingface"])
def test_weights_replaced_after_their_check_are_refused_in_one_line(tmp_path, model, hidden_act):
    """The weights a build reads are held to the shapes checked before it (for a `FusedBert`,
    gelu, and bert4keras' graph, relu): a model directory whose weights were replaced by another
    model's meanwhile is one line naming the file and the variable, not an assignment's
    traceback."""
    from bert_whitening.models import load_transformer

    from helpers import hf_tensors, write_hf

    def write(directory, config):
        if model == "huggingface":
            return write_hf(str(directory), hf_tensors(config), config)
        write_checkpoint(str(directory), config, random_weights(config), TINY_VOCAB)
        return str(directory)

    config = dict(TINY_CONFIG, hidden_act=hidden_act)
    files = find_model(write(tmp_path / "checked", config))
    assert files.variable_shapes  # the checks before a build read them
    other = write(tmp_path / "other", dict(config, intermediate_size=40))
    for name in os.listdir(other):
        if name.startswith(("model.safetensors", "bert_model.ckpt")):
            shutil.copy(os.path.join(other, name), os.path.join(files.directory, name))
    with pytest.raises(CheckpointError) as raised:
        load_transformer(files, "bert", False, "a bert model")
    assert re.fullmatch(
        re.escape(files.weights_path)
        + r": bert/encoder/layer_0/intermediate/dense/(kernel|bias) holds \((24, )?40,?\), "
        r"where it held \((24, )?48,?\) when it was checked: the file changed while the model loaded",
        str(raised.value),
    )

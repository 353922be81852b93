"""convert-hf's writer: it builds from the file it checked and counts what loading holds first."""

import os

import numpy as np
import pytest

from bert_whitening.backend import tf
from bert_whitening.checkpoints import CheckpointError
from checkpoints.test_huggingface import google_named

from helpers import TINY_CONFIG, hf_tensors, write_hf


def test_convert_hf_writes_and_builds_from_the_file_it_checked(tiny_hf, tmp_path, monkeypatch):
    """A model.safetensors replaced by another model's once convert-hf has read its first
    tensor is neither written nor built: the file stays open from the first read on, so what is
    written, and then loaded to check it, is the checked file's tensors."""
    from bert_whitening.checkpoints import convert
    from bert_whitening.checkpoints.convert import convert_hf

    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1])
    other = write_hf(str(tmp_path / "other"), hf_tensors(dict(TINY_CONFIG, intermediate_size=40), seed=9))
    write = convert.write_checkpoint

    def replace_after_the_first_read(staging, config, variables, *rest):
        variables["bert/embeddings/word_embeddings"]  # noqa: B018  opens the file
        os.replace(os.path.join(other, "model.safetensors"), os.path.join(directory, "model.safetensors"))
        write(staging, config, variables, *rest)

    monkeypatch.setattr(convert, "write_checkpoint", replace_after_the_first_read)
    convert_hf(directory, str(tmp_path / "google"))
    prefix = str(tmp_path / "google" / "bert_model.ckpt")
    for name, value in google_named(tiny_hf[1]).items():
        np.testing.assert_array_equal(tf.train.load_variable(prefix, name), value, err_msg=name)


def test_convert_hf_counts_what_loading_holds_before_it_writes(tiny_hf, tmp_path, monkeypatch, tensors_never_read):
    """convert-hf writes every tensor at once (the model's size and one tensor being read), then
    loads the model from the same file to check it, a weight at a time (the variables and the
    largest weight twice, more than the write): one byte short of the load is refused before
    anything is read or written; at it, the conversion goes on (and reads the tensors, which
    this test forbids)."""
    from bert_whitening.checkpoints.convert import convert_hf
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    directory, tensors = tiny_hf
    sizes = [4 * value.size for name, value in google_named(tensors).items() if "pooler" not in name]
    needed = sum(sizes) + 2 * max(*sizes, 3 * 4 * TINY_CONFIG["hidden_size"] ** 2)
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed - 1, "the {} of a test"))
    refused = r"loading model.safetensors needs at least .*, more than the .* of a test$"
    with pytest.raises(CheckpointError, match=refused):
        convert_hf(directory, str(tmp_path / "google"))
    assert not os.path.exists(tmp_path / "google")
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed, "the {} of a test"))
    with pytest.raises(AssertionError, match="were read"):
        convert_hf(directory, str(tmp_path / "google"))

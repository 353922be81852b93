"""`train` from the command line: its output read by every command, and `--resume`."""

import json

import numpy as np
from training.test_state import stop_in_epoch

from bert_whitening.checkpoints import TRAINING_FILE
from bert_whitening.encoding import encode
from bert_whitening.models import build_encoder

from helpers import (
    SENTENCES,
    run,
    state_directory,
)


def test_the_command_trains_and_every_command_reads_its_output(tiny_model, pair_files, tmp_path, capsys):
    output = tmp_path / "model"
    argv = ["train", "--train", pair_files[0], "--valid", pair_files[1], "--output", output, "--model", tiny_model[0]]
    argv += ["--pooling", "cls", "--epochs", "2", "--learning-rate", "1e-3", "--batch-size", "8"]
    assert run(*argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("epoch 0 (the base model): valid Spearman ")
    assert [line.split(":")[0] for line in printed[1:3]] == ["epoch 1/2", "epoch 2/2"]
    assert all(", valid Spearman " in line and "train loss " in line for line in printed[1:3])
    record = json.loads((output / TRAINING_FILE).read_text())
    assert printed[3].startswith("kept epoch %d (valid Spearman " % record["kept_epoch"])
    assert record["hyperparameters"]["batch_size"] == 8 and record["hyperparameters"]["threshold"] is None
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(sentence + "\n" for sentence in SENTENCES), encoding="utf-8")
    assert run("encode", "--model", output, "--pooling", "cls", "--output", tmp_path / "v.npy", sentences) == 0
    expected = encode(build_encoder(str(output), pooling="cls"), SENTENCES)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    assert run("train", "--train", pair_files[0], "--output", output, "--model", tiny_model[0]) == 1  # exists


def test_the_command_resumes(tiny_model, pair_files, tmp_path, monkeypatch, caplog):
    output = tmp_path / "model"
    argv = ["train", "--train", pair_files[0], "--output", output, "--model", tiny_model[0], "--resume"]
    argv += ["--epochs", "2", "--batch-size", "8"]
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        assert run(*argv) == 130
    assert "kept in %s: the same command with --resume continues" % state_directory(output) in caplog.text
    assert run(*argv) == 0
    assert json.loads((output / TRAINING_FILE).read_text())["resumed_after"] == [1]
    assert not state_directory(output).exists()

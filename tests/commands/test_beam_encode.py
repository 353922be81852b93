"""`beam-encode` from the command line: shards, prefixes, inputs and options it refuses before any work."""

import logging
import os

import pytest

from bert_whitening import beam, cli

from helpers import run


def test_beam_encode_refuses_to_mix_with_existing_shards(tiny_model, corpus, tmp_path, caplog):
    prefix = tmp_path / "vectors"
    (tmp_path / "vectors-00000-of-00002.tfrecord").write_bytes(b"")
    assert run("beam-encode", "--model", tiny_model[0], "--input", corpus / "a.txt", "--output", prefix) == 1
    assert "1 output shards already exist" in caplog.text


def test_beam_encode_refuses_a_prefix_another_run_writes_and_clears_what_a_killed_run_left(
    tiny_model, corpus, tmp_path, caplog
):
    """Two runs at once under one prefix both succeeded, with shards of two sets mixed
    (``-of-00002`` beside ``-of-00003``); a run killed with SIGKILL left Beam's sink directory."""
    from bert_whitening.io.atomic import claimed_prefix

    prefix = tmp_path / "vectors"
    command = ("beam-encode", "--model", tiny_model[0], "--input", corpus / "a.txt", "--output", prefix)
    with claimed_prefix(str(prefix)):
        assert run(*command) == 1
    assert "vectors: another run writes it now" in caplog.text
    assert os.listdir(tmp_path) == ["corpus"]
    left = tmp_path / "beam-temp-vectors-d1f38464e9b011f195e102fc00000001"
    left.mkdir()
    (left / "a-partial-shard").write_bytes(b"\0" * 10)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert run(*command) == 0
    assert "removed %s, left by an interrupted run" % left in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["corpus", "vectors-00000-of-00001.tfrecord", "vectors.manifest.json"]


def test_a_shard_count_beyond_the_bound_is_refused_before_any_work(tiny_model, corpus, tmp_path, capsys):
    """--num-shards 1000000000 ran until it was killed, holding gigabytes, before any shard."""
    from bert_whitening.arguments import MAX_SHARDS
    from bert_whitening.config import EncoderConfig

    with pytest.raises(SystemExit):
        cli.main(
            ["beam-encode", "--input", str(corpus / "a.txt"), "--output", str(tmp_path / "v"), "--num-shards", "10001"]
        )
    assert "argument --num-shards: '10001' is not an integer 0..%d" % MAX_SHARDS in capsys.readouterr().err
    for count in (MAX_SHARDS + 1, -1, 2.0, True):
        with pytest.raises(beam.BertWhiteningError, match="num_shards must be an integer 0..%d" % MAX_SHARDS):
            beam.encode_on_runner(
                [str(corpus / "a.txt")], EncoderConfig(tiny_model[0]), str(tmp_path / "v"), num_shards=count
            )
    assert os.listdir(tmp_path) == ["corpus"]


def test_unreadable_input_fails_beam_encode_without_leftovers(tiny_model, corpus, tmp_path, caplog):
    (corpus / "bad.txt").write_bytes(b"fine\n\xff\xfe not utf-8\n")
    out = tmp_path / "out"
    out.mkdir()
    assert run("beam-encode", "--model", tiny_model[0], "--input", corpus / "*.txt", "--output", out / "vectors") == 1
    assert "bad.txt:2: not UTF-8 text (byte 0xff" in caplog.text
    assert os.listdir(out) == []  # no shard, no sink temporary directory
    assert (
        run("beam-encode", "--model", tiny_model[0], "--input", corpus / "none-*.txt", "--output", out / "vectors") == 1
    )
    assert os.listdir(out) == []


@pytest.mark.parametrize(
    "mistyped, meant", [("--n-componets", "--n-components"), ("--direct_num_workerz=2", "--direct_num_workers")]
)
def test_a_beam_command_refuses_an_option_neither_it_nor_beam_knows(
    tiny_model, corpus, tmp_path, capsys, mistyped, meant
):
    """A Beam command passes what it does not know to Beam, which dropped a misspelt option with
    a warning: ``beam-encode --n-componets 64`` wrote vectors of every dimension."""
    with pytest.raises(SystemExit):
        cli.main(
            [
                "beam-encode",
                "--model",
                tiny_model[0],
                "--input",
                str(corpus / "a.txt"),
                "--output",
                str(tmp_path / "v"),
                mistyped,
                "64",
            ]
        )
    assert (
        "beam-encode: error: unrecognized option %s; did you mean %s?" % (mistyped.split("=")[0], meant)
        in capsys.readouterr().err
    )
    assert os.listdir(tmp_path) == ["corpus"]
    with pytest.raises(
        beam.BertWhiteningError, match="--n-componets: not a Beam pipeline option, which Beam would drop"
    ):
        beam.run(lambda pipeline: None, ["--n-componets", "--direct_num_workers=1"])


def test_empty_inputs_are_refused_before_the_pipeline_runs(tiny_model, tmp_path, caplog):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert (
        run(
            "beam-encode", "--model", tiny_model[0], "--input", tmp_path / "empty.txt", "--output", tmp_path / "vectors"
        )
        == 1
    )
    assert "empty.txt: empty input (no lines)" in caplog.text
    assert os.listdir(tmp_path) == ["empty.txt"]


@pytest.mark.parametrize("command", ["beam-encode", "beam-fit"])
def test_a_beam_input_that_is_not_a_regular_file_is_refused_as_such(tiny_model, tmp_path, caplog, command):
    """Beam sizes its inputs: a FIFO was called empty, and /dev/zero too."""
    os.mkfifo(tmp_path / "in.fifo")
    output = tmp_path / ("vectors" if command == "beam-encode" else "w.npz")
    assert run(command, "--model", tiny_model[0], "--input", tmp_path / "in.fifo", "--output", output) == 1
    assert caplog.messages[-1] == "%s: a FIFO, not a regular file: cannot be read as a Beam input" % (
        tmp_path / "in.fifo"
    )

"""The command line, run in-process on the tiny checkpoint."""

import argparse
import logging
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import run, with_run


@pytest.mark.parametrize(
    "command, said",
    [
        (["encode", "--output", "out.npy"], "{0}: empty input"),
        (["fit", "--output", "out.npz"], "no sentences in {0}"),
        (["fit", "--method", "flow", "--output", "out.npz"], "no sentences in {0}"),
    ],
)
def test_an_empty_input_is_refused_before_the_model_is_built(tiny_model, tmp_path, caplog, monkeypatch, command, said):
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    output = tmp_path / command[-1]
    assert run(*command[:-1], output, "--model", tiny_model[0], empty) == 1
    assert caplog.messages[-1] == said.format(empty) and not output.exists()


def test_help_lists_every_option_with_its_default_without_importing_tensorflow():
    code = (
        "import sys; from bert_whitening.cli import build_parser; "
        "[build_parser().parse_args([c, '--help']) for c in ('fit',)] "
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    text = " ".join(result.stdout.split())
    assert "--maxlen MAXLEN" in text and "(default: 64)" in text
    assert "(default: first-last-avg)" in text and "(default: -1)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_a_mistyped_option_is_refused_by_its_command_naming_the_closest(capsys):
    """It was refused by the top-level parser, with the command's usage missing and the value
    after it taken as an INPUT (``unrecognized arguments: --n-componets x.txt``)."""
    from bert_whitening.cli import main

    with pytest.raises(SystemExit):
        main(["encode", "--n-componets", "64", "--output", "v.npy", "x.txt"])
    err = capsys.readouterr().err
    assert "bert-whitening encode: error: unrecognized option --n-componets; did you mean --n-components?" in err
    assert "usage: bert-whitening encode" in err
    with pytest.raises(SystemExit):
        main(["export", "--whitening", "w.npz", "--output", "served", "stray"])  # no option: the words are named
    assert "bert-whitening export: error: unrecognized arguments: stray" in capsys.readouterr().err


def test_a_log_line_during_a_progress_bar_gets_a_line_of_its_own():
    """It was written after the bar on the bar's line: ``encoding: 0sent [00:00, ?sent/s]INFO: ...``."""
    import io

    from tqdm import tqdm

    from bert_whitening.cli import AboveTheBar

    stream = io.StringIO()
    handler = AboveTheBar(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    with tqdm(total=10, file=stream, desc="encoding", mininterval=0) as bar:
        bar.update(3)
        handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "chosen", (), None))
        bar.update(3)
    lines = stream.getvalue().replace("\r", "\n").split("\n")
    assert "INFO: chosen" in lines


@pytest.mark.parametrize("kind", ["numpy", "tensorflow", "other"])
def test_memory_running_out_is_one_line_and_any_other_error_stays_a_bug(monkeypatch, caplog, kind):
    """numpy's MemoryError, FAISS's (std::bad_alloc) and TensorFlow's ResourceExhaustedError ended
    the command with a traceback of a hundred lines."""
    from bert_whitening import commands
    from bert_whitening.backend import tf

    raised = {
        "numpy": MemoryError("Unable to allocate 37.3 GiB for an array with shape (100000, 100000)"),
        "tensorflow": tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[4096,256]\nhint"
        ),
        "other": RuntimeError("a bug"),
    }[kind]

    def failing(args):
        raise raised

    monkeypatch.setattr(commands, "COMMANDS", with_run("search", failing))
    if kind == "other":
        with pytest.raises(RuntimeError, match="a bug"):
            run("search", "--index", "idx", "q")
        return
    assert run("search", "--index", "idx", "q") == 1
    (line,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    first = str(raised).splitlines()[0] if kind == "numpy" else "OOM when allocating tensor with shape[4096,256]"
    assert line == "out of memory (%s): lower --batch-size or --maxlen, or give the command less at once" % first


def test_log_level_is_taken_after_the_command_too_and_version_is_printed(capsys):
    from bert_whitening.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["encode", "--log-level", "DEBUG", "--output", "v.npy", "x.txt"]).log_level == "DEBUG"
    assert parser.parse_args(["--log-level", "ERROR", "encode", "--output", "v.npy", "x.txt"]).log_level == "ERROR"
    assert parser.parse_args(["encode", "--output", "v.npy", "x.txt"]).log_level == "INFO"
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    assert capsys.readouterr().out.strip() == "bert-whitening 0.1.0"


def test_help_says_each_default_once_and_none_that_is_empty():
    from bert_whitening.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        assert "(default: None)" not in text and "(default: False)" not in text, name
        assert not re.search(r"\(default[^()]*(\([^()]*\))?[^()]*\) \(default", text), name
    export = " ".join(commands["export"].format_help().split())
    assert "(default: the whitening file's, else first-last-avg) --maxlen" in export
    assert "(default: 64)" in export  # a default the help does not spell out is still appended
    evaluate = " ".join(commands["eval"].format_help().split())
    assert "(default: all)" in evaluate and "(default: [" not in evaluate  # a list as it is typed
    check = subprocess.run(
        [sys.executable, "-c", "import sys, bert_whitening.cli; print('tensorflow' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "False"


def test_console_script_runs(files, tiny_model):
    tmp_path, sentences, _ = files
    output = tmp_path / "v.npy"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_whitening",
            "encode",
            "--model",
            tiny_model[0],
            "--pooling",
            "last-avg",
            "--output",
            str(output),
            sentences,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert np.load(output).shape == (50, 24)
    assert "oneDNN" not in result.stderr and "cuda" not in result.stderr.lower()
    assert "encoded 50 sentences" in result.stderr


def test_a_list_of_numbers_beginning_with_a_negative_one_is_a_value():
    """Python 3.11's argparse took ``--n-components -1,256`` for an unknown option ("expected one
    argument"); a negative number alone it took as a value."""
    from bert_whitening import cli

    parser = cli.build_parser()
    args = parser.parse_args(["eval-retrieval", "--task", "STS-B", "--n-components", "-1,256"])
    assert args.n_components == [-1, 256]
    args = parser.parse_args(["eval", "--task", "STS-B", "--n-components", "-1", "--beta", "-0.5,1"])
    assert (args.n_components, args.beta) == ([-1], [-0.5, 1.0])

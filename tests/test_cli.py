"""The command line, run in-process on the tiny checkpoint."""

import argparse
import itertools
import logging
import re
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening.encoding import encode
from bert_whitening.models import with_whitening
from bert_whitening.whitening import Whitening, WhiteningStats, fit_whitening

from helpers import run, with_run

WORDS = ["今天", "天气", "很好", "我们", "在北京", "喝茶", "the cat", "is on", "the mat", "hello"]
MANY = ["".join(parts) for parts in itertools.permutations(WORDS, 3)][::7][:80]  # 80 sentences


@pytest.fixture
def files(tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(s + "\n" for s in MANY[:50]), encoding="utf-8")
    pairs = tmp_path / "pairs.data"
    pairs.write_text(
        "".join("%s\t%s\t%d\n" % (a, b, i % 6) for i, (a, b) in enumerate(zip(MANY[50:65], MANY[65:80], strict=True))),
        encoding="utf-8",
    )
    return tmp_path, str(sentences), str(pairs)


def test_fit_then_encode_equals_the_python_api(files, tiny_model, encoders):
    tmp_path, sentences, pairs = files
    model = tiny_model[0]
    whitening_path = tmp_path / "w.npz"
    assert run("fit", "--model", model, "--output", whitening_path, sentences, pairs) == 0
    whitening = Whitening.load(str(whitening_path))
    assert whitening.count == 80 and whitening.pooling == "first-last-avg"
    assert whitening.model_identity["name"] == "tiny_bert" and whitening.n_components == -1

    encoder = encoders["first-last-avg"]
    pair_sentences = [s for pair in zip(MANY[50:65], MANY[65:80], strict=True) for s in pair]
    expected = fit_whitening(WhiteningStats().update(encode(encoder, MANY[:50] + pair_sentences)))
    np.testing.assert_allclose(whitening.mean, expected.mean, rtol=1e-6)
    np.testing.assert_allclose(whitening.eigenvalues, expected.eigenvalues, rtol=1e-4, atol=1e-9)

    vectors_path = tmp_path / "v.npy"
    assert run("encode", "--model", model, "--whitening", whitening_path, "--output", vectors_path, sentences) == 0
    vectors = np.load(vectors_path)
    assert vectors.shape == (50, 24) and vectors.dtype == np.float32
    reference = whitening.transform(encode(encoder, MANY[:50]).astype(np.float64))
    np.testing.assert_allclose(vectors, reference, atol=1e-4)

    assert (
        run(
            "encode",
            "--model",
            model,
            "--whitening",
            whitening_path,
            "--n-components",
            6,
            "--output",
            vectors_path,
            sentences,
        )
        == 0
    )
    np.testing.assert_allclose(
        np.load(vectors_path), whitening.transform(encode(encoder, MANY[:50]).astype(np.float64), 6), atol=1e-4
    )


def test_encode_without_whitening_writes_normalised_pooled_vectors(files, tiny_model, encoders):
    tmp_path, sentences, _ = files
    output = tmp_path / "v.npy"
    assert run("encode", "--model", tiny_model[0], "--pooling", "cls", "--output", output, sentences) == 0
    expected = encode(with_whitening(encoders["cls"]), MANY[:50])
    np.testing.assert_allclose(np.load(output), expected, atol=1e-6)
    assert (
        run("encode", "--model", tiny_model[0], "--pooling", "cls", "--no-normalize", "--output", output, sentences)
        == 0
    )
    np.testing.assert_allclose(np.load(output), encode(encoders["cls"], MANY[:50]), atol=1e-6)


def test_rank_deficient_fit_keeps_the_supported_dimensions_and_refuses_more(files, tiny_model, caplog):
    tmp_path, sentences, _ = files
    few = tmp_path / "few.txt"
    few.write_text("".join(s + "\n" for s in MANY[:12]), encoding="utf-8")  # 12 < 24 dims
    output, vectors = tmp_path / "w.npz", tmp_path / "v.npy"
    assert run("fit", "--model", tiny_model[0], "--n-components", 12, "--output", output, few) == 1
    assert "n_components 12 is larger than the rank 11" in caplog.text and not output.exists()
    assert run("fit", "--model", tiny_model[0], "--output", output, few) == 0
    assert Whitening.load(str(output)).rank == 11
    assert run("encode", "--model", tiny_model[0], "--whitening", output, "--output", vectors, few) == 0
    assert np.load(vectors).shape == (12, 11)
    assert "keeps the 11 dimensions the covariance supports, not all 24" in caplog.text
    assert (
        run(
            "encode",
            "--model",
            tiny_model[0],
            "--whitening",
            output,
            "--n-components",
            -1,
            "--allow-rank-deficient",
            "--output",
            vectors,
            few,
        )
        == 0
    )
    assert np.load(vectors).shape == (12, 24) and np.isfinite(np.load(vectors)).all()


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


def test_a_fit_the_data_cannot_give_names_the_data(tiny_model, tmp_path, caplog):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n")  # three empty sentences: one vector three times
    assert run("fit", "--model", tiny_model[0], "--output", tmp_path / "w.npz", blank) == 1
    assert caplog.messages[-1] == "%s: all 3 vectors are identical: nothing to whiten" % blank


def test_bad_inputs_fail_cleanly_without_output(files, tiny_model, tmp_path, caplog):
    _, sentences, pairs = files
    model = tiny_model[0]
    output = tmp_path / "out.npy"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert run("encode", "--model", model, "--output", output, empty) == 1
    assert "empty.txt: empty input" in caplog.text
    assert run("fit", "--model", model, "--output", tmp_path / "w.npz", empty) == 1

    broken = tmp_path / "broken.data"
    broken.write_text("a\tb\t1\nno label here\tx\n", encoding="utf-8")
    assert run("fit", "--model", model, "--output", tmp_path / "w.npz", broken) == 1
    assert "broken.data:2: expected" in caplog.text
    assert (
        run("fit", "--model", model, "--output", tmp_path / "w.npz", "--skip-bad-lines", "--n-components", 1, broken)
        == 0
    )
    assert "skipped 1 malformed lines" in caplog.text

    assert run("encode", "--model", str(tmp_path / "missing"), "--output", output, sentences) == 1
    assert "missing does not exist" in caplog.text

    rng = np.random.default_rng(0)
    other = tmp_path / "other.npz"
    fit_whitening(WhiteningStats().update(rng.normal(size=(50, 16))), pooling="first-last-avg").save(str(other))
    assert run("encode", "--model", model, "--whitening", other, "--output", output, sentences) == 1
    assert "dimension 16 but the model's hidden size is 24" in caplog.text
    assert run("fit", "--model", model, "--n-components", 30, "--output", other, sentences) == 1
    assert "n_components 30 is larger than the model's hidden size 24 (tiny_bert)" in caplog.text
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failure_midway_leaves_no_partial_output(files, tiny_model, monkeypatch):
    tmp_path, sentences, _ = files
    monkeypatch.setattr("bert_whitening.encoding.CHUNK_SENTENCES", 10)
    calls = []

    def failing(encoder, sequences, batch_size, bar):
        calls.append(len(sequences))
        if len(calls) == 3:
            raise OSError("simulated failure")
        return np.tile(np.eye(1, encoder.dim, dtype=np.float32), (len(sequences), 1))  # unit vectors

    monkeypatch.setattr("bert_whitening.encoding.encode_ids", failing)
    output = tmp_path / "v.npy"
    assert run("encode", "--model", tiny_model[0], "--output", output, sentences) == 1
    assert calls == [10, 10, 10] and not output.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


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

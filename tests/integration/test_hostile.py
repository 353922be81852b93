"""The command line used as a hostile user would: pipes, FIFOs, signals, two exports at once, a
full disk, nonsense numbers and damaged files. A case that needs a process of its own (pipes,
FIFOs, signals, concurrency, a full disk) runs ``bert-whitening`` in a subprocess (`cli`); refusals
and the runs that only set a case up run in this process (`here`). Each checks the exit status,
the message, the output and what is left in the directory."""

import contextlib
import dataclasses
import errno
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bert_whitening.checkpoints import find_model
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import SENTENCES, TINY_CONFIG, commands_in_a_fresh_process, here, launched, refused

pytestmark = pytest.mark.slow

LINES = [("%s %d" % (SENTENCES[i % len(SENTENCES)], i)).strip() for i in range(300)]


def cli(*argv, stdin=None, input=None, timeout=300):
    """``bert-whitening ARGV`` in a new process."""
    return subprocess.run(
        [sys.executable, "-m", "bert_whitening"] + [str(a) for a in argv],
        stdin=stdin,
        input=input,
        capture_output=True,
        timeout=timeout,
    )


def start(*argv, tmpdir=None):
    """The command in a child that takes SIGINT as a terminal's user gets it (with ``TMPDIR`` set to
    ``tmpdir`` when given)."""
    environment = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        launched(["-m", "bert_whitening", *argv]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    )


def leftovers(directory):
    """Names in ``directory`` that a finished run must not leave: temporaries and staging."""
    return sorted(name for name in os.listdir(directory) if ".bert-whitening-tmp-" in name)


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model, whitened):
    """The tiny model, its whitening file, a 300-line sentence file and a pair file."""
    directory = tmp_path_factory.mktemp("hostile")
    sentences = directory / "sentences.txt"
    sentences.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    pairs = directory / "pairs.data"
    pairs.write_text("".join("%s\t%s\t%d\n" % (LINES[i], LINES[-1 - i], i % 6) for i in range(150)), encoding="utf-8")
    whitening = directory / "w.npz"
    identity = find_model(tiny_model[0]).identity("bert")  # as `fit` records it
    dataclasses.replace(whitened.whitening, model_identity=identity).save(str(whitening))
    reference = directory / "reference.npy"
    # in a process of its own, as the runs compared with it: a process that ran other tests first may
    # round differently (its precision and TensorFlow's settings are the process's)
    result = cli("encode", "--model", tiny_model[0], "--whitening", whitening, "--output", reference, sentences)
    assert result.returncode == 0, result.stderr
    return {
        "dir": directory,
        "model": tiny_model[0],
        "sentences": sentences,
        "pairs": pairs,
        "whitening": whitening,
        "reference": np.load(reference),
    }


def encode_args(work, output):
    return ["encode", "--model", work["model"], "--whitening", work["whitening"], "--output", output]


# --- input that can be read only once -------------------------------------------------------


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_encode_from_a_pipe_equals_encode_from_the_file(work, tmp_path, name):
    output = tmp_path / "v.npy"
    with open(work["sentences"], "rb") as stream:
        feeder = subprocess.Popen(["cat"], stdin=stream, stdout=subprocess.PIPE)
        result = cli(*encode_args(work, output), name, stdin=feeder.stdout)
        feeder.wait()
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(output), work["reference"], atol=1e-6)
    assert leftovers(tmp_path) == []


def test_encode_from_a_named_fifo(work, tmp_path):
    fifo, output = tmp_path / "fifo", tmp_path / "v.npy"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(work["sentences"].read_bytes()))
    writer.start()
    result = cli(*encode_args(work, output), fifo, timeout=120)
    writer.join()
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(output), work["reference"], atol=1e-6)


def test_fit_from_a_pipe_fits_on_every_sentence(work, tmp_path):
    from_file, from_pipe = tmp_path / "file.npz", tmp_path / "pipe.npz"
    args = ["fit", "--model", work["model"], "--output"]
    assert here(*args, from_file, work["pairs"]).returncode == 0
    result = cli(*args, from_pipe, "-", input=work["pairs"].read_bytes())
    assert result.returncode == 0, result.stderr
    with np.load(from_file) as expected, np.load(from_pipe) as actual:
        assert json.loads(str(actual["meta"]))["count"] == 300 == json.loads(str(expected["meta"]))["count"]
        np.testing.assert_allclose(actual["mean"], expected["mean"], rtol=1e-6)


def stdin_twice(work, out):
    """Each command that reads several files, standard input named in two of them."""
    sts_task(out.parent / "data")
    task = ["--model", work["model"], "--task", "STS-B", "--data-dir", out.parent / "data", "--n-components", "8"]
    return {
        "fit": ["fit", "--model", work["model"], "--output", out, "-", "-"],
        "index": ["index", "--model", work["model"], "--output", out, "-", "/dev/stdin"],
        "eval --fit-on": ["eval", *task, "--fit-on", "-", "-"],
        "eval-retrieval --distractors": ["eval-retrieval", *task, "--distractors", "-", "-"],
    }


@pytest.mark.parametrize("command", ["fit", "index", "eval --fit-on", "eval-retrieval --distractors"])
def test_standard_input_named_twice_is_refused_before_any_work(work, tmp_path, command):
    """A second reading of a pipe finds it empty: ``index - -`` once indexed the lines once and
    said nothing."""
    out = tmp_path / "out"
    with open(work["sentences"], "rb") as stream:
        feeder = subprocess.Popen(["cat"], stdin=stream, stdout=subprocess.PIPE)
        result = cli(*stdin_twice(work, out)[command], stdin=feeder.stdout, timeout=120)
        feeder.kill()
        feeder.wait()
    refused(result, "twice", "can be read only once")
    assert not out.exists()


def test_standard_input_named_twice_is_refused_by_the_python_api(work, tmp_path):
    from bert_whitening import SentenceEncoder
    from bert_whitening.config import EncoderConfig
    from bert_whitening.errors import DataError
    from bert_whitening.retrieval.search import build_index

    with pytest.raises(DataError, match="can be read only once"):
        SentenceEncoder.load(work["model"]).fit(files=["-", "-"])
    with pytest.raises(DataError, match="can be read only once"):
        build_index(EncoderConfig(model=work["model"], normalize=True), str(tmp_path / "index"), inputs=["-", "-"])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "argv",
    [
        lambda work, victim: ["encode", "--model", work["model"], "--output", victim, "-"],
        lambda work, victim: ["encode", "--model", work["model"], "--output", "/dev/stdin", "-"],
        lambda work, victim: ["fit", "--model", work["model"], "--output", victim, "-"],
    ],
)
def test_an_output_that_is_the_file_standard_input_comes_from_is_refused(work, tmp_path, argv):
    """``encode --output victim.txt - < victim.txt`` replaced the text it read by its vectors."""
    victim = tmp_path / "victim.txt"
    shutil.copy(work["sentences"], victim)
    before = victim.read_bytes()
    with open(victim, "rb") as stream:
        result = cli(*argv(work, victim), stdin=stream, timeout=120)
    refused(result, "it is the input - (standard input); choose another output")
    assert victim.read_bytes() == before and os.listdir(tmp_path) == ["victim.txt"]


def test_a_lone_carriage_return_does_not_split_a_line(work, tmp_path):
    source, output = tmp_path / "cr.txt", tmp_path / "v.npy"
    source.write_bytes(b"one\rtwo\nthree\r\nfour\n")
    result = here(*encode_args(work, output), source)
    assert result.returncode == 0, result.stderr
    assert np.load(output).shape[0] == 3


# --- nonsense numbers, refused when parsed ---------------------------------------------------


@pytest.mark.parametrize(
    "option, value, requirement",
    [
        ("--batch-size", "-1", "a positive integer"),
        ("--batch-size", "0", "a positive integer"),
        ("--maxlen", "0", "an integer >= 2"),
        ("--maxlen", "1", "an integer >= 2"),
    ],
)
def test_nonsense_numbers_are_refused_with_name_and_value(work, tmp_path, option, value, requirement):
    result = here(*encode_args(work, tmp_path / "v.npy"), option, value, work["sentences"])
    refused(result, option, repr(value), requirement, status=2)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--beta", "nan"],
        ["fit", "--gamma", "inf"],
        ["eval", "--task", "STS-B", "--beta", "1,nan"],
    ],
)
def test_non_finite_beta_and_gamma_are_refused(work, tmp_path, argv):
    option = argv[-2]
    tail = ["--output", tmp_path / "w.npz", work["pairs"]] if argv[0] == "fit" else []
    refused(here(*argv, "--model", work["model"], *tail), option, "finite", status=2)
    assert os.listdir(tmp_path) == []


def test_a_nan_label_is_refused_with_file_and_line(work, tmp_path):
    task = tmp_path / "T"
    task.mkdir()
    (task / "T.test.data").write_text("a\tb\t1\nc\td\tnan\n", encoding="utf-8")
    result = here("eval", "--model", work["model"], "--task", "T", "--data-dir", tmp_path, "--n-components", "0,-1,8")
    refused(result, "T.test.data:2:", "finite numeric label", "'c\\td\\tnan'")


def test_maxlen_beyond_the_position_table_is_refused_before_loading(work, tmp_path):
    result = here(*encode_args(work, tmp_path / "v.npy"), "--maxlen", "65", work["sentences"])
    refused(result, "maxlen 65 is larger than the 64 positions")


def test_cheap_mistakes_are_refused_before_the_model_loads(work, tmp_path):
    model, whitening = work["model"], work["whitening"]
    missing_dir = tmp_path / "no" / "v.npy"
    refused(here(*encode_args(work, missing_dir), work["sentences"]), "no directory")
    refused(
        here("encode", "--model", model, "--n-components", "8", "--output", tmp_path / "v.npy", work["sentences"]),
        "n_components 8 needs a whitening",
    )
    refused(
        here(*encode_args(work, tmp_path / "v.npy"), "--n-components", "30", work["sentences"]),
        "n_components 30 is larger than the vector dimension 24",
    )
    base = tmp_path / "base"
    base.write_text("a file")
    refused(here("export", "--model", model, "--whitening", whitening, "--output", base), "is a file, not a directory")
    # None of these built the model: each answered well before a model build would.
    assert sorted(os.listdir(tmp_path)) == ["base"]


# --- pair files that are not what they seem --------------------------------------------------


def test_a_pair_file_with_a_header_names_the_header_line(work, tmp_path):
    pairs = tmp_path / "header.data"
    pairs.write_bytes(b"sentence1\tsentence2\tlabel\n" + work["pairs"].read_bytes())
    result = here("fit", "--model", work["model"], "--output", tmp_path / "w.npz", pairs)
    refused(result, "header.data:1: expected sentence1<TAB>sentence2<TAB>label")
    assert leftovers(tmp_path) == [] and not (tmp_path / "w.npz").exists()
    skipped = here("fit", "--model", work["model"], "--skip-bad-lines", "--output", tmp_path / "w.npz", pairs)
    assert skipped.returncode == 0 and b"skipped 1 malformed lines" in skipped.stderr
    assert b"read as senteval_cn pairs" in skipped.stderr


def test_a_file_mixing_sentences_and_pairs_is_refused(work, tmp_path):
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("one\ntwo\nthree\na\tb\t1\n", encoding="utf-8")
    result = here("fit", "--model", work["model"], "--output", tmp_path / "w.npz", mixed)
    refused(result, "mixed.txt:4: a sentence1<TAB>sentence2<TAB>label line")


# --- damaged files -----------------------------------------------------------------------------


def damaged_whitening(work, tmp_path, kind):
    path = tmp_path / ("%s.npz" % kind)
    data = work["whitening"].read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        with np.load(work["whitening"]) as stored:
            arrays = dict(stored)
        meta = json.loads(str(arrays["meta"]))
        meta.update({"crafted": {"dim": "24; rm -rf /"}, "pickled": {"model": 3}}[kind])
        arrays["meta"] = np.array(json.dumps(meta))
        np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("truncated", "not a readable whitening file"),
        ("crafted", "metadata: 'dim' is '24; rm -rf /', expected int"),
        ("pickled", "metadata: 'model' is 3, expected dict"),
    ],
)
def test_a_damaged_whitening_file_is_one_line(work, tmp_path, kind, message):
    path = damaged_whitening(work, tmp_path, kind)
    result = here(
        "encode", "--model", work["model"], "--whitening", path, "--output", tmp_path / "v.npy", work["sentences"]
    )
    refused(result, str(path), message)


def test_damaged_checkpoints_are_one_line_naming_the_file(work, tmp_path):
    import shutil

    google = tmp_path / "google"
    shutil.copytree(work["model"], google)
    data = next(google.glob("bert_model.ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:1000])
    refused(here("encode", "--model", google, "--output", tmp_path / "v.npy", work["sentences"]), str(google))
    hf = tmp_path / "hf"
    hf.mkdir()
    config = json.loads((google / "bert_config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    shutil.copy(google / "vocab.txt", hf / "vocab.txt")
    (hf / "model.safetensors").write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a":')
    refused(
        here("encode", "--model", hf, "--output", tmp_path / "v.npy", work["sentences"]),
        str(hf / "model.safetensors"),
        "truncated or not safetensors",
    )


def test_truncated_gzip_and_bad_utf8_inputs_name_file_and_line(work, tmp_path):
    packed = gzip.compress(work["sentences"].read_bytes() * 20)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    refused(
        here("fit", "--model", work["model"], "--output", tmp_path / "w.npz", cut),
        "cut.txt.gz: truncated or corrupt compressed data after line",
    )
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\n\xff\xfe\n")
    refused(here(*encode_args(work, tmp_path / "v.npy"), bad), "bad.txt:3: not UTF-8 text")
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "v.npy").exists()
    assert leftovers(tmp_path) == []


def test_control_characters_in_a_file_name_are_shown_escaped(tmp_path):
    """An ESC in a name the user gave must not reach the terminal raw, nor a carriage return hide
    the start of the line."""
    result = cli("search", "--index", str(tmp_path / "idx\x1b[2J\rgone"), "query")
    assert result.returncode == 1 and b"\x1b" not in result.stderr and b"\r" not in result.stderr
    assert result.stderr.decode() == "ERROR: %s: the directory does not exist\n" % (tmp_path / "idx\\x1b[2J\\x0dgone")


def test_a_traceback_only_with_debug_logging(work, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\n")
    quiet = here(*encode_args(work, tmp_path / "v.npy"), bad)
    refused(quiet, "bad.txt:1")
    loud = here("--log-level", "DEBUG", *encode_args(work, tmp_path / "v.npy"), bad)
    assert loud.returncode == 1 and b"Traceback" in loud.stderr


# --- signals ---------------------------------------------------------------------------------


def wait_for(condition, process, seconds=120):
    deadline = time.time() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()[1].decode()
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "number, status, name",
    [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT"), (signal.SIGHUP, 129, "SIGHUP")],
)
def test_a_signal_during_encode_leaves_nothing_and_says_one_line(work, tmp_path, number, status, name):
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 200), encoding="utf-8")
    process = start(*encode_args(work, tmp_path / "v.npy"), "--batch-size", "8", big)
    wait_for(lambda: leftovers(tmp_path), process)
    process.send_signal(number)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    assert "interrupted by %s; nothing was written" % name in stderr.decode() and b"Traceback" not in stderr
    assert sorted(os.listdir(tmp_path)) == ["big.txt"]


def test_sigterm_during_beam_encode_is_one_line_and_143(work, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 100), encoding="utf-8")
    output = tmp_path / "out"
    output.mkdir()
    process = start(
        "beam-encode", "--model", work["model"], "--input", big, "--batch-size", "8", "--output", output / "vectors"
    )
    wait_for(lambda: any(name.startswith("beam-temp") for name in os.listdir(output)), process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert stderr.decode().strip().splitlines()[-1] == "ERROR: interrupted by SIGTERM; nothing was written"
    assert b"Traceback" not in stderr and os.listdir(output) == []


def autograph_modules(tmpdir):
    """TensorFlow's AutoGraph modules under ``tmpdir`` (a run writes them to its own directory)."""
    return list(tmpdir.rglob("__autograph_generated_file*"))


def a_temporary_directory(tmp_path):
    """A TMPDIR for a command, holding another program's file."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / "someone-else.txt").write_text("kept", encoding="utf-8")
    return tmpdir


@pytest.mark.parametrize(
    "command, number", [("encode", signal.SIGINT), ("export", signal.SIGHUP), ("beam-fit", signal.SIGTERM)]
)
def test_an_interrupted_command_leaves_nothing_in_tmpdir(work, tmp_path, command, number):
    """AutoGraph's modules (removed at a normal exit only) and Beam's temporary directories go to
    the run's own directory, which the interrupted run removes."""
    tmpdir = a_temporary_directory(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 100), encoding="utf-8")
    model = ["--model", work["model"]]
    argv = {
        "encode": [*encode_args(work, tmp_path / "v.npy"), "--batch-size", "8", big],
        "export": ["export", *model, "--whitening", work["whitening"], "--text", "--output", tmp_path / "served"],
        "beam-fit": ["beam-fit", *model, "--batch-size", "8", "--input", big, "--output", tmp_path / "w.npz"],
    }[command]
    process = start(*argv, tmpdir=tmpdir)
    ready = {"export": lambda: staging_with_child(tmp_path / "served")}.get(command, lambda: True)
    wait_for(lambda: autograph_modules(tmpdir) and ready(), process)
    process.send_signal(number)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + number, stderr
    assert os.listdir(tmpdir) == ["someone-else.txt"]


def test_the_temporary_directory_of_a_killed_command_is_removed_by_the_next(work, tmp_path):
    tmpdir = a_temporary_directory(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 100), encoding="utf-8")
    process = start(*encode_args(work, tmp_path / "v.npy"), "--batch-size", "8", big, tmpdir=tmpdir)
    wait_for(lambda: autograph_modules(tmpdir), process)
    process.kill()
    process.communicate(timeout=60)
    (left,) = leftovers(tmpdir)
    a_minute_ago = time.time() - 60  # older than STALE_AFTER_SECONDS, as when a user runs again
    os.utime(tmpdir / left, (a_minute_ago, a_minute_ago))
    rerun = start(*encode_args(work, tmp_path / "v.npy"), work["sentences"], tmpdir=tmpdir)
    _, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0 and ("removing %s" % (tmpdir / left)).encode() in stderr, stderr
    assert os.listdir(tmpdir) == ["someone-else.txt"]  # a normal run leaves nothing either


LINGERING_THREAD = """
import dataclasses, signal, sys, threading, time
from bert_whitening import cli, commands

def run(args):  # a library thread still busy (Beam finishing a bundle) when SIGTERM arrives
    threading.Thread(target=time.sleep, args=(300,)).start()
    signal.raise_signal(signal.SIGTERM)

commands.COMMANDS = tuple(
    dataclasses.replace(c, run=run) if c.name == "search" else c for c in commands.COMMANDS
)
sys.exit(cli.console_main())
"""


def test_an_interrupted_command_exits_though_a_thread_is_still_busy():
    """Once main has cleaned up after SIGTERM, a non-daemon thread cannot keep the process alive
    (Python would wait for it at exit); observed with beam-encode under load."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", LINGERING_THREAD, "search", "--index", "x", "q"], capture_output=True, timeout=120
    )
    assert result.returncode == 143 and time.monotonic() - started < 60, result.stderr
    assert result.stderr.decode().strip().splitlines()[-1] == "ERROR: interrupted by SIGTERM; nothing was written"


SIGNAL_WHILE_IMPORTING = """
import builtins, signal, sys
import bert_whitening.__main__ as entry

loaded = "numpy" in sys.modules  # importing the package must not take time of its own
importing = builtins.__import__

def signalled(name, *arguments, **keywords):  # SIGTERM as the command line's modules start loading
    if name == "bert_whitening.cli":
        signal.raise_signal(signal.SIGTERM)
    return importing(name, *arguments, **keywords)

builtins.__import__ = signalled
sys.argv[0] = "bert-whitening"
sys.exit(entry.main() if not loaded else "numpy was imported with the package")
"""


@pytest.mark.parametrize("number, name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_a_signal_while_the_command_line_is_imported_is_one_line(number, name):
    """The handlers are set before `bert_whitening.cli` and numpy are imported: before, SIGINT
    there printed a KeyboardInterrupt traceback, and SIGTERM ended the process without a line."""
    script = SIGNAL_WHILE_IMPORTING.replace("SIGTERM", name)
    result = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True, timeout=120)
    assert result.returncode == 128 + number, result.stderr
    assert result.stderr.decode().strip().splitlines() == ["ERROR: interrupted by %s; nothing was written" % name]
    assert result.stdout == b""  # stopped before the help was printed


SIGNAL_AFTER_WRITING = """
import dataclasses, signal, sys
from bert_whitening import cli, commands
from bert_whitening.io import atomic

when = sys.argv.pop(1)

def write(path):
    with open(path, "w") as stream:
        stream.write("complete")

def run(args):
    atomic.write_atomically(sys.argv[-1], write)
    if when == "while running":
        signal.raise_signal(signal.SIGTERM)

if when == "after returning":  # the command has returned; the process is about to exit
    cli.gc.freeze = lambda: signal.raise_signal(signal.SIGTERM)
commands.COMMANDS = tuple(
    dataclasses.replace(c, run=run) if c.name == "search" else c for c in commands.COMMANDS
)
sys.exit(cli.console_main())
"""


@pytest.mark.parametrize("when", ["while running", "after returning"])
def test_a_signal_after_an_output_is_in_place_names_it_as_written(tmp_path, when):
    """A SIGTERM once an output is renamed into place must not say that nothing was written; one
    that comes after the command returned still gets its line, not a silent 143."""
    output = tmp_path / "out\x1b.txt"  # shown escaped, as every message is
    argv = [sys.executable, "-c", SIGNAL_AFTER_WRITING, when, "search", "--index", "x", "q", output]
    (tmp_path / "tmp").mkdir()  # its own TMPDIR: a stale one of another test's killed run is not removed here
    environment = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    result = subprocess.run(argv, capture_output=True, timeout=120, env=environment)
    assert result.returncode == 143, result.stderr
    line = "ERROR: interrupted by SIGTERM; %s written in full, nothing else" % (tmp_path / "out\\x1b.txt")
    assert result.stderr.decode().strip().splitlines() == [line]
    assert output.read_text() == "complete"


def verification_children(parent):
    """PIDs of the export verification children of process ``parent``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as stream:
                argv = stream.read().split(b"\0")
            _, parent_pid = _process_state(pid)
        except OSError:
            continue
        if b"bert_whitening.export.verify" in argv and parent_pid == parent:
            found.append(int(pid))
    return found


def _process_state(pid):
    """``(state letter, parent PID)`` from ``/proc/PID/stat`` (fields after the command name)."""
    with open("/proc/%s/stat" % pid) as stream:
        fields = stream.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def alive(pids):
    """Those of ``pids`` still running (a zombie, dead but not yet reaped, is not)."""
    running = []
    for pid in pids:
        try:
            if _process_state(pid)[0] != "Z":
                running.append(pid)
        except OSError:
            pass
    return running


def staging_with_child(base):
    if not base.is_dir():
        return None
    for name in os.listdir(base):
        if ".bert-whitening-tmp-" in name and (base / name / ".verify").is_dir():
            return name
    return None


def interrupted_export(work, tmp_path, number, corpus=False):
    """An export to ``tmp_path/served`` sent signal ``number`` while its verification child
    runs; checks the child dies with it. Returns ``(BASE, the export's argv)``."""
    base = tmp_path / "served"
    argv = ["export", "--model", work["model"], "--whitening", work["whitening"], "--output", base]
    if corpus:  # the child then checks serve_search too
        index = tmp_path / "index"
        assert here("index", *argv[1:5], "--output", index, work["sentences"]).returncode == 0
        argv += ["--corpus", index]
    process = start(*argv)
    wait_for(lambda: staging_with_child(base) and verification_children(process.pid), process)
    children = verification_children(process.pid)
    process.send_signal(number)
    process.communicate(timeout=60)
    assert process.returncode == (143 if number == signal.SIGTERM else -signal.SIGKILL)
    deadline = time.time() + 30
    while alive(children) and time.time() < deadline:  # dies with its parent
        time.sleep(0.1)
    assert alive(children) == []
    return base, argv


@pytest.mark.parametrize("number, corpus", [(signal.SIGTERM, False), (signal.SIGKILL, True)])
def test_a_signal_during_export_leaves_no_child(work, tmp_path, number, corpus):
    base, _ = interrupted_export(work, tmp_path, number, corpus)
    if number == signal.SIGTERM:
        assert not base.exists()  # the staging and the BASE it created are removed
    else:
        assert len(leftovers(base)) == 1  # recognisable, for the next run to remove


# --- two exports at once -----------------------------------------------------------------------


def test_two_exports_after_a_killed_one_remove_its_staging_and_take_two_versions(work, tmp_path):
    """Two exports at once into the BASE of one killed by SIGKILL: its staging is removed (by
    either, as a user's next run would), each takes a version of its own, and neither is
    replaced by name."""
    base, argv = interrupted_export(work, tmp_path, signal.SIGKILL)
    (leftover,) = leftovers(base)
    a_minute_ago = time.time() - 60  # older than STALE_AFTER_SECONDS, as when a user runs again
    os.utime(base / leftover, (a_minute_ago, a_minute_ago))
    runs = [start(*argv, "--n-components", str(k)) for k in (16, 8)]
    results = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], results
    assert sorted(os.listdir(base)) == ["1", "2"]

    def kept(version):
        return json.loads((base / version / "assets" / "bert_whitening.json").read_text())["n_components"]

    assert sorted(map(kept, ("1", "2"))) == [8, 16]
    said = sorted(stderr.decode().split("exported ")[1].split(" ")[0] for _, stderr in results)
    assert said == [str(base / "1"), str(base / "2")]
    before = kept("1")
    refused(cli(*argv, "--n-components", "4", "--version", "1"), "already exists")
    assert kept("1") == before and sorted(os.listdir(base)) == ["1", "2"]


def test_refusals_are_decided_before_tensorflow_is_imported(work, tmp_path):
    """What can be checked without TensorFlow is: a refused command answers at once."""
    (tmp_path / "served" / "1").mkdir(parents=True)
    (tmp_path / "a_file").write_text("", encoding="utf-8")
    other = tmp_path / "w8.npz"  # fitted on 8-dimensional vectors: not the tiny model's 24
    fit_whitening(WhiteningStats().update(np.random.default_rng(0).normal(size=(40, 8)))).save(str(other))
    index = tmp_path / "index"  # its index.json then says one row fewer than it has
    assert here("index", "--model", work["model"], "--output", index, work["sentences"]).returncode == 0
    record = json.loads((index / "index.json").read_text(encoding="utf-8"))
    (index / "index.json").write_text(json.dumps(dict(record, count=record["count"] - 1)), encoding="utf-8")
    export = ["export", "--model", work["model"], "--whitening", work["whitening"], "--output"]
    cases = [
        export + [tmp_path / "served", "--version", "1"],  # an existing version
        export + [tmp_path / "a_file"],  # a base that is a file
        ["fit", "--model", work["model"], "--output", tmp_path / "w.npz", tmp_path / "missing.txt"],
        ["encode", "--model", work["model"], "--whitening", other, "--output", tmp_path / "v.npy", work["sentences"]],
        ["search", "--index", index, "query"],
        ["export", "--model", work["model"], "--corpus", index, "--output", tmp_path / "served-corpus"],
    ]
    statuses, imported, stderr = commands_in_a_fresh_process(cases)
    assert statuses == [1] * len(cases), stderr
    assert not imported, stderr


# --- a full disk -------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only; skipped where mounting is refused)."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % result.stderr.decode().strip())
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def filled_but_one_block(mount):
    """Fill ``mount`` in 4 kB files, then free one block."""
    number = 0
    with contextlib.suppress(OSError):
        while True:
            (mount / ("fill%d" % number)).write_bytes(b"x" * 4096)
            number += 1
    os.unlink(mount / "fill0")
    return sorted(os.listdir(mount))


def test_encode_onto_a_full_disk_is_one_line_and_leaves_nothing(work, small_disk, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 10), encoding="utf-8")  # 3000 x 24 x 4 B
    output = small_disk / "v.npy"
    message = refused(cli(*encode_args(work, output), big), "cannot write %s" % output, "No space left on device")
    assert ".bert-whitening-tmp-" not in message
    assert os.listdir(small_disk) == []


@pytest.mark.xdist_group("exported")
def test_a_verification_that_cannot_write_its_response_is_one_oserror(exported, small_disk):
    """The child's traceback (30 lines ending in [Errno 28]) was the export's refusal, headed
    "failed to load or run"."""
    from bert_whitening.export import run_in_fresh_process

    filled_but_one_block(small_disk)  # the request takes the block left, and none is left for the response
    with pytest.raises(OSError) as raised:
        run_in_fresh_process(exported[1], np.array([[2, 5, 3]], np.int32), ["a"], scratch=str(small_disk / "scratch"))
    assert raised.value.errno == errno.ENOSPC and str(raised.value) == "[Errno 28] No space left on device"
    assert not (small_disk / "scratch").exists()


def test_export_onto_a_full_disk_is_one_line_and_leaves_nothing(work, small_disk):
    base = small_disk / "served"
    result = cli("export", "--model", work["model"], "--whitening", work["whitening"], "--output", base)
    message = refused(result, str(base))
    assert ".bert-whitening-tmp-" not in message
    assert os.listdir(small_disk) == []  # not even an empty BASE


@pytest.mark.parametrize("command", ["index", "beam-encode"])
def test_index_and_beam_encode_onto_a_full_disk_are_one_line(work, small_disk, tmp_path, command):
    big = tmp_path / "big.txt"
    big.write_text("".join(line + "\n" for line in LINES * 10), encoding="utf-8")
    output = small_disk / "out"
    argv = ["--model", work["model"], "--whitening", work["whitening"]]
    if command == "index":
        argv += ["--output", output, big]
    else:
        argv += ["--input", big, "--output", output / "vectors"]
        output.mkdir()
    message = refused(cli(command, *argv), "No space left on device")
    assert ".bert-whitening-tmp-" not in message
    assert str(output) in message or command == "beam-encode", message  # Beam's sink names no file
    assert [name for _, _, names in os.walk(small_disk) for name in names] == []


def test_an_index_that_fails_on_a_full_disk_leaves_nothing_at_once_in_python(work, small_disk):
    """Its staging was removed only when the garbage collector reached the failed writer (a
    failure closing its files skipped the staging's exit)."""
    import gc

    from bert_whitening import SentenceEncoder

    gc.disable()
    try:
        with pytest.raises(OSError, match="No space left on device") as raised:
            SentenceEncoder.load(work["model"]).index(LINES * 10, path=str(small_disk / "index"))
        assert str(small_disk / "index") in str(raised.value)
        assert os.listdir(small_disk) == []
    finally:
        gc.enable()


def sts_task(directory):
    """An STS-B task folder of `LINES` pairs with graded labels in ``directory``."""
    (directory / "STS-B").mkdir(parents=True)
    pairs = zip(LINES, LINES[::-1], strict=True)
    lines = ("%s\t%s\t%d\n" % (a, b, i % 6) for i, (a, b) in enumerate(pairs))
    (directory / "STS-B" / "STS-B.test.data").write_text("".join(lines), encoding="utf-8")


def test_a_closed_standard_stream_the_command_needs_is_refused_before_any_work(work, tmp_path):
    """A command that would read ``-`` from a closed standard input, or print its results to a
    closed standard output, says so in one line with status 1 (a closed output was a silent exit
    0, and a closed input a traceback after the model had loaded)."""
    sts_task(tmp_path / "data")
    cases = [
        (["fit", "--model", work["model"], "--output", tmp_path / "w.npz", "-"], "cannot read standard input (-)"),
        (["eval", "--model", work["model"], "--task", "STS-B", "--data-dir", tmp_path / "data"], "standard output"),
    ]
    for argv, message in cases:
        closed = [0] if "-" in argv else [1]
        result = subprocess.run(
            launched(["-m", "bert_whitening", *argv], close=closed), stderr=subprocess.PIPE, timeout=120
        )
        stderr = result.stderr.decode()
        assert result.returncode == 1 and message in stderr and "Traceback" not in stderr, stderr
        assert "Reading checkpoint" not in stderr and not (tmp_path / "w.npz").exists()


def test_a_reader_that_goes_away_ends_the_command_quietly_with_141(work, tmp_path):
    sts_task(tmp_path / "data")
    read, write = os.pipe()
    os.close(read)  # no reader: the first line printed breaks the pipe
    result = subprocess.run(
        [sys.executable, "-m", "bert_whitening", "eval", "--model", work["model"], "--task", "STS-B"]
        + ["--data-dir", str(tmp_path / "data"), "--n-components", "0"],
        stdout=write,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    os.close(write)
    assert result.returncode == 141, result.stderr
    assert b"Traceback" not in result.stderr and b"BrokenPipe" not in result.stderr


@pytest.mark.parametrize("command", ["train", "convert-hf"])
def test_a_model_written_onto_a_full_disk_is_one_line_naming_it(work, small_disk, tmp_path, command):
    """TensorFlow's SaveV2 failed with a ResourceExhaustedError, which the command line took for
    memory running out ("lower --batch-size or --maxlen"): convert-hf has neither."""
    output = small_disk / "out"
    if command == "train":
        argv = ["train", "--model", work["model"], "--train", work["pairs"], "--epochs", "1", "--output", output]
    else:
        from helpers import hf_tensors, write_hf

        argv = ["convert-hf", write_hf(str(tmp_path / "hf"), hf_tensors(TINY_CONFIG)), output]
    left = filled_but_one_block(small_disk)
    message = refused(cli(*argv), "%s: cannot write the model: No space left on device" % output)
    assert "memory" not in message and ".bert-whitening-tmp-" not in message
    assert sorted(os.listdir(small_disk)) == left

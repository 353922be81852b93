"""`beam-fit` from the command line: a bad line, its output, and its refusals' format."""

import logging
import os

from bert_whitening.whitening import Whitening

from helpers import LINES, run


def test_malformed_line_fails_the_pipeline_and_writes_nothing(tiny_model, corpus, tmp_path, caplog):
    with open(corpus / "c.data", "a", encoding="utf-8") as stream:
        stream.write("only one field\n")
    output = tmp_path / "w.npz"
    assert run("beam-fit", "--model", tiny_model[0], "--input", corpus / "*", "--output", output) == 1
    assert (
        "c.data:7: expected sentence1<TAB>sentence2<TAB>label with a finite numeric label, got 'only one field'"
    ) in caplog.text
    assert os.listdir(tmp_path) == ["corpus"]  # no whitening file, no temporary file

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert (
            run("beam-fit", "--model", tiny_model[0], "--input", corpus / "*", "--skip-bad-lines", "--output", output)
            == 0
        )
    assert "c.data: skipped 1 malformed lines" in caplog.text
    assert Whitening.load(output).count == len(LINES) + 12


def test_beam_fit_writes_its_output_as_every_local_output_is_written(tiny_model, corpus, tmp_path):
    """Through `write_atomically`: a link's target is written and the link kept, and a long name
    (within the file system's limit) gets a temporary name that fits beside it."""
    (tmp_path / "target.npz").write_text("old")
    (tmp_path / "link.npz").symlink_to("target.npz")
    long_name = tmp_path / ("w" * 220 + ".npz")
    for output in (tmp_path / "link.npz", long_name):
        assert run("beam-fit", "--model", tiny_model[0], "--input", corpus / "a.txt", "--output", output) == 0
    assert (tmp_path / "link.npz").is_symlink()
    assert Whitening.load(str(tmp_path / "target.npz")).count == Whitening.load(str(long_name)).count == 17
    assert sorted(os.listdir(tmp_path)) == sorted(["corpus", "link.npz", "target.npz", long_name.name])


def test_a_refusal_after_beam_logged_through_the_root_logger_keeps_the_command_s_format(tiny_model, corpus, tmp_path):
    """Reading Beam's option names imported Beam, which logged a warning through the root logger
    before the command set its own handler: the root logger took a handler of Python's default
    format, and every later line came as ``ERROR:bert_whitening:...``."""
    import subprocess
    import sys

    argv = ["beam-fit", "--model", tiny_model[0], "--input", corpus / "a.txt", "--output", tmp_path / "w.npz"]
    result = subprocess.run(
        [sys.executable, "-m", "bert_whitening", *map(str, argv), "--job_endpoint", "x"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "\nERROR: --job_endpoint is a portable runner's option" in "\n" + result.stderr, result.stderr

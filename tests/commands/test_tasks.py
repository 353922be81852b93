"""What `eval` and `eval-retrieval` share: tasks run one after another, each report kept."""

import os
import shutil

from bert_whitening import cli

from helpers import synthetic_pairs


def test_a_later_task_that_fails_keeps_the_earlier_tables_and_is_named(
    tiny_model, sample_task, tmp_path, capsys, caplog
):
    """A rank below k on the second task's data was one line naming no task, and the first
    task's scores were lost: each task's table is printed as it is done."""
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    (tmp_path / "SMALL").mkdir()
    lines = "".join("%s\t%s\t%d\n" % pair for pair in synthetic_pairs(3))
    (tmp_path / "SMALL" / "SMALL.test.data").write_text(lines, encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--data-dir", str(tmp_path), "--n-components", "0,8"]
    assert cli.main(argv + ["--task", "SAMPLE", "--task", "SMALL"]) == 1
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:3] == ["task", "split", "pairs"] and "SAMPLE     test" in printed
    assert "ERROR    bert_whitening:cli.py" in caplog.text
    assert "SMALL: n_components 8 is larger than the rank" in caplog.text

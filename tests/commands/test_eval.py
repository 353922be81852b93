"""`eval` from the command line on the tiny checkpoint, against the original procedure's numbers."""

import json
import logging
import os
import pathlib
import shutil

import numpy as np
import pytest

from bert_whitening import cli, encoding
from bert_whitening.data import load_task
from bert_whitening.encoding import encode

from helpers import synthetic_pairs
from reference import spearman, su_9079_kernel


def test_eval_command_writes_table_json_and_plot(tiny_model, sample_task, tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    held_out = tmp_path / "corpus.txt"
    held_out.write_text("".join(a + "\n" + b + "\n" for a, b, _ in synthetic_pairs(210)), encoding="utf-8")
    argv = [
        "eval",
        "--model",
        tiny_model[0],
        "--task",
        "SAMPLE",
        "--data-dir",
        sample_task,
        "--n-components",
        "0,-1,8",
        "--beta",
        "1,0.5",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    ]
    assert cli.main(argv) == 0
    table = capsys.readouterr().out
    assert "SAMPLE     test        60" in table and "w-avg" in table and "k=8 b=0.5 g=1" in table
    report = json.loads(out_json.read_text())
    task = report["tasks"]["SAMPLE"]
    assert task["counts"] == {"train": 90, "valid": 60, "test": 60} and task["fitted_on_vectors"] == 420
    assert [r["setting"] for r in task["results"]] == ["raw", "k=all", "k=all b=0.5 g=1", "k=8", "k=8 b=0.5 g=1"]
    assert report["model"]["name"] == "tiny_bert" and report["seconds"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(argv[:-4] + ["--fit-on", "train", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["tasks"]["SAMPLE"]["fitted_on_vectors"] == 180
    assert cli.main(argv[:-4] + ["--fit-on", str(held_out), "--json", str(out_json)]) == 0
    from_file = json.loads(out_json.read_text())["tasks"]["SAMPLE"]
    assert from_file["fitted_on_vectors"] == 420
    np.testing.assert_allclose(
        from_file["results"][1]["splits"]["test"], task["results"][1]["splits"]["test"], atol=1e-6
    )  # same sentences


def test_a_pair_file_given_as_the_task_is_scored_as_the_test_split_of_a_task_of_its_own(
    tiny_model, sample_task, tmp_path, caplog
):
    """A user's pair file had to be copied into a senteval_cn layout first (DIR/T/T.test.data)."""
    mine = tmp_path / "mine.data"
    mine.write_bytes((pathlib.Path(sample_task) / "SAMPLE" / "SAMPLE.test.data").read_bytes())
    as_task, as_file = tmp_path / "task.json", tmp_path / "file.json"
    common = ["eval", "--model", tiny_model[0], "--n-components", "0,8"]
    test_split = ["--fit-on", str(pathlib.Path(sample_task) / "SAMPLE" / "SAMPLE.test.data")]  # what mine's "all" is
    assert cli.main([*common, *test_split, "--task", "SAMPLE", "--data-dir", sample_task, "--json", str(as_task)]) == 0
    assert cli.main([*common, "--task", str(mine), "--data-dir", str(tmp_path / "none"), "--json", str(as_file)]) == 0
    expected, scored = json.loads(as_task.read_text())["tasks"]["SAMPLE"], json.loads(as_file.read_text())["tasks"]
    assert list(scored) == [str(mine)] and scored[str(mine)]["counts"] == {"test": 60}
    for mine_result, task_result in zip(scored[str(mine)]["results"], expected["results"], strict=True):
        assert mine_result["splits"]["test"] == pytest.approx(task_result["splits"]["test"], abs=1e-6)
    assert cli.main([*common, "--task", str(mine), "--json", str(mine)]) == 1  # an input: never written over
    assert "cannot write %s: it is the input %s" % (mine, mine) in caplog.text
    assert cli.main([*common, "--fit-on", "train", "--task", str(mine)]) == 1
    assert "--fit-on train: %s has no train split (splits: test)" % mine in caplog.text
    assert cli.main([*common, "--task", "sample", "--data-dir", sample_task]) == 1
    assert (
        "sample: no sample.{train,valid,test}.data under %s (tasks there: SAMPLE; a pair"  # a task of the user's
        % (pathlib.Path(sample_task) / "sample")
        in caplog.text
    )


def test_eval_scores_several_poolings_on_one_pass_as_each_alone(tiny_model, sample_task, tmp_path, capsys, caplog):
    """Each pooling's report as its own run gives it, from one pass over the task's sentences;
    the held-out file's whitening statistics are each pooling's own."""
    out = tmp_path / "r.json"
    held_out = tmp_path / "corpus.txt"
    held_out.write_text("".join(a + "\n" + b + "\n" for a, b, _ in synthetic_pairs(50, seed=1)), encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task, "--n-components", "0,-1,8"]
    argv += ["--fit-on", str(held_out), "--json", str(out)]
    alone = {}
    for pooling in ("cls", "first-last-avg"):
        assert cli.main(argv + ["--pooling", pooling]) == 0
        alone[pooling] = json.loads(out.read_text())["tasks"]["SAMPLE"]
    capsys.readouterr()
    widths = []
    run_batches = encoding._run_batches
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            encoding,
            "_run_batches",
            lambda encoder, *rest: widths.append(encoder.dim) or run_batches(encoder, *rest),
        )
        caplog.set_level(logging.INFO, logger="bert_whitening")
        assert cli.main(argv + ["--pooling", "cls,first-last-avg,cls"]) == 0
    assert widths == [48, 48]  # the task's sentences, then the held-out file, each once for both
    assert "SAMPLE, first-last-avg pooling: fitting and scoring" in caplog.text
    printed = capsys.readouterr().out
    assert 0 <= printed.index("cls pooling\n") < printed.index("first-last-avg pooling\n")
    reports = json.loads(out.read_text())["poolings"]
    assert [report["pooling"] for report in reports] == ["cls", "first-last-avg"]
    for report in reports:
        got, expected = report["tasks"]["SAMPLE"], alone[report["pooling"]]
        assert (got["rank"], got["fitted_on_vectors"]) == (expected["rank"], 100)
        assert [r["setting"] for r in got["results"]] == [r["setting"] for r in expected["results"]]
        for mine, theirs in zip(got["results"], expected["results"], strict=True):
            for split, value in theirs["splits"].items():
                assert abs(mine["splits"][split] - value) <= 1e-3, (report["pooling"], mine["setting"], split)
    plot = tmp_path / "p.png"
    assert cli.main(argv + ["--pooling", "cls,pooler", "--plot", str(plot)]) == 1
    assert "--plot draws one pooling: give one --pooling, or leave --plot out" in caplog.text
    assert not plot.exists()


def test_fit_on_train_without_a_train_split_is_an_error(tiny_model, sample_task, tmp_path, caplog, monkeypatch):
    """Refused before the model is built: after it, the refusal came once every split was encoded."""
    from bert_whitening import models

    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    os.remove(tmp_path / "SAMPLE" / "SAMPLE.train.data")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", str(tmp_path)]
    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    assert cli.main(argv + ["--fit-on", "train", "--n-components", "0,-1,8"]) == 1
    assert "--fit-on train: SAMPLE has no train split (splits: valid, test)" in caplog.text
    for fit_on, said in (
        (["all", "train"], "--fit-on all is given alone, not among files"),
        (["nosuch"], "nosuch: no such"),
    ):
        assert cli.main(argv + ["--fit-on", *fit_on, "--n-components", "0,8"]) == 1
        assert said in caplog.text
    monkeypatch.undo()
    assert cli.main(argv + ["--n-components", "0,25"]) == 1  # refused before anything is encoded
    assert "n_components 25 is larger than the model's hidden size 24" in caplog.text
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    for methods in ("whitening", "whitening,flow"):  # the fit's "needs at least 2 vectors" named the task
        assert cli.main(argv + ["--fit-on", str(empty), "--n-components", "0,-1", "--method", methods]) == 1
        assert caplog.messages[-1] == "SAMPLE: --fit-on %s: no sentences in it" % empty


@pytest.mark.parametrize(
    "content, said", [("e\tf\t1\ng\th\t1\n", ":1-2: every label is 1"), ("", ": the evaluation file holds no pairs")]
)
def test_a_split_with_nothing_to_correlate_is_refused_naming_its_file(
    tiny_model, sample_task, tmp_path, caplog, content, said
):
    """All labels equal, or no pair: no Spearman (scipy gave NaN with a warning and eval exited
    0). Refused before the model is built, naming the file."""
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    path = tmp_path / "SAMPLE" / "SAMPLE.test.data"
    path.write_text(content, encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", str(tmp_path), "--n-components", "8"]
    assert cli.main(argv) == 1
    assert str(path) + said in caplog.text


def test_eval_beta_0_gamma_0_reproduces_kexue_9079(tiny_model, encoders, sample_task, tmp_path):
    """9079's setting without centring: Sigma is the raw second moment, not the covariance."""
    out = tmp_path / "r.json"
    assert (
        cli.main(
            [
                "eval",
                "--model",
                tiny_model[0],
                "--task",
                "SAMPLE",
                "--data-dir",
                sample_task,
                "--n-components",
                "8",
                "--beta",
                "0",
                "--gamma",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    (result,) = json.loads(out.read_text())["tasks"]["SAMPLE"]["results"]
    splits = load_task("SAMPLE", sample_task)
    vectors = {
        split: [
            encode(encoders["first-last-avg"], [pair[side] for pair in pairs]).astype(np.float64) for side in (0, 1)
        ]
        for split, pairs in splits.items()
    }
    shift, kernel, _ = su_9079_kernel(np.concatenate(sum(vectors.values(), [])), 0.0, 0.0)
    for split, (first, second) in vectors.items():
        first, second = ((v - shift) @ kernel[:, :8] for v in (first, second))
        cosines = (first * second).sum(axis=1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
        expected = spearman([label for _, _, label in splits[split]], cosines)
        assert abs(result["splits"][split] - expected) <= 1e-3, (split, result["splits"][split], expected)


def test_eval_scores_flows_beside_whitenings_on_one_encoding(tiny_model, sample_task, tmp_path, capsys):
    import json

    out_json = tmp_path / "r.json"
    argv = [
        "eval",
        "--model",
        tiny_model[0],
        "--task",
        "SAMPLE",
        "--data-dir",
        sample_task,
        "--n-components",
        "0,-1",
        "--method",
        "whitening,flow",
        "--flow-seeds",
        "0,1",
        "--json",
        out_json,
    ]
    assert cli.main([str(a) for a in argv]) == 0
    results = json.loads(out_json.read_text())["tasks"]["SAMPLE"]["results"]
    assert [(r.get("method"), r.get("seed")) for r in results][1:] == [("whitening", None), ("flow", 0), ("flow", 1)]
    flows = [r["splits"]["test"] for r in results if r.get("method") == "flow"]
    assert flows[0] != flows[1] and all(-1 <= value <= 1 for value in flows)
    with pytest.raises(SystemExit):
        cli.main([str(a) for a in argv[:-2]] + ["--method", "whitening,umap"])


def test_a_failure_after_an_output_was_written_says_so(tiny_model, sample_task, tmp_path, caplog, monkeypatch):
    """--json written, then --plot failed: the error line said nothing of the JSON in place."""
    import errno

    from bert_whitening import plots

    def full(*arguments):
        raise OSError(errno.ENOSPC, "cannot write %s: No space left on device" % (tmp_path / "r.png"))

    monkeypatch.setattr(plots, "plot_report", full)
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task, "--n-components", "0,8"]
    assert cli.main(argv + ["--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]) == 1
    assert "r.png: No space left on device (%s written in full before it)" % (tmp_path / "r.json") in caplog.text
    assert (tmp_path / "r.json").exists() and not (tmp_path / "r.png").exists()


def test_the_model_is_checked_against_the_longest_maxlen_its_tasks_need(tiny_model, sample_task, tmp_path, caplog):
    """PAWSX's 128 tokens beside another task's 64, on a model of 64 positions: refused before
    the model is built, not checked at the shorter one."""
    from bert_whitening import models

    for task in ("SAMPLE", "PAWSX"):
        shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / task)
        for split in ("train", "valid", "test"):
            os.rename(tmp_path / task / ("SAMPLE.%s.data" % split), tmp_path / task / ("%s.%s.data" % (task, split)))
    argv = ["eval", "--model", tiny_model[0], "--data-dir", str(tmp_path), "--task", "SAMPLE", "--task", "PAWSX"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
        assert cli.main(argv + ["--n-components", "0,8"]) == 1
    assert "maxlen 128 is larger than the 64 positions of" in caplog.text


def test_eval_codes_scores_every_setting_in_each_code_and_prints_the_budget_table(
    tiny_model, sample_task, tmp_path, capsys
):
    out_json = tmp_path / "r.json"
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task, "--n-components", "0,8"]
    assert cli.main(argv + ["--json", str(out_json)]) == 0
    floats = json.loads(out_json.read_text())["tasks"]["SAMPLE"]
    assert "budgets" not in floats and "budget" not in capsys.readouterr().out  # the default: floats as ever
    assert [(r["codes"], r["bytes"]) for r in floats["results"]] == [("float32", 4 * 24), ("float32", 32)]
    assert cli.main(argv + ["--codes", "float32,int8,binary", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    task = json.loads(out_json.read_text())["tasks"]["SAMPLE"]
    assert [(r["setting"], r["codes"], r["bytes"]) for r in task["results"]] == [
        ("raw", "float32", 96),
        ("raw", "int8", 24),
        ("raw", "binary", 3),
        ("k=8", "float32", 32),
        ("k=8", "int8", 8),
        ("k=8", "binary", 1),
    ]
    assert [r["splits"] for r in task["results"] if r["codes"] == "float32"] == [r["splits"] for r in floats["results"]]
    budgets = task["budgets"]
    assert [choice["bytes"] for choice in budgets] == [1536, 1024, 768, 512, 384, 256, 128, 64, 32, 16, 8, 4]
    for choice in budgets:
        within = [r for r in task["results"] if r["bytes"] <= choice["bytes"]]
        best = max(within, key=lambda r: r["splits"]["valid"])
        assert (choice["setting"], choice["codes"], choice["chosen_on"]) == (best["setting"], best["codes"], "valid")
        assert (choice["valid"], choice["test"]) == (best["splits"]["valid"], best["splits"]["test"])
    assert "SAMPLE: the best setting within each byte budget, chosen on its valid split" in printed
    assert "SAMPLE     codes             float32       int8     binary    float32" in printed


def test_eval_refuses_int8_codes_beside_a_flow_before_the_model(tiny_model, sample_task, monkeypatch):
    from bert_whitening import models

    from helpers import here, refused

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    common = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task]
    said = "codes int8 take their scales from a whitening, which a flow has not"
    refused(here(*common, "--method", "flow", "--codes", "binary,int8"), said)
    refused(here(*common, "--codes", "int4"), "--codes: 'int4' is not a comma-separated list of", status=2)

"""`make demo`, the README's main job, runs to the end: fit, evaluate and export on the English
sample pairs, then serve_text from the reloaded SavedModel (a signature change once broke it)."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT, run

pytestmark = pytest.mark.slow


def test_the_demo_runs_and_prints_the_served_table(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "demo.py"), "--out", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pair (whitened cosine from the reloaded SavedModel's serve_text)" in result.stdout
    assert "data: data/sample-en/pairs.data, 200 pairs" in result.stdout  # the built-in model's language
    assert "0.0% of the sample's tokens are [UNK]" in result.stdout
    golds = [line.split()[0] for line in result.stdout.split("pair (whitened cosine")[1].splitlines()[1:7]]
    assert golds == ["5", "4", "3", "2", "1", "0"]  # a pair of each gold score, highest first
    assert os.path.isfile(tmp_path / "demo" / "served" / "1" / "saved_model.pb")
    check_eval_agrees(result.stdout, tmp_path)


def check_eval_agrees(printed, tmp_path):
    """`eval` on the same pairs, model and pooling prints the demo's Spearman for each setting:
    one figure for one setting, whichever command computes it."""
    demo = re.findall(r"^  (?:raw \(no whitening\)|whitened, k = (\w+))\s+(\d\.\d{4})$", printed, re.M)
    settings = [k.replace("all", "-1") or "0" for k, _ in demo]
    assert settings == ["0", "-1", "256", "128", "64", "32"], printed
    report = tmp_path / "eval.json"
    pairs = os.path.join(ROOT, "data", "sample-en", "pairs.data")
    assert (
        run(
            "eval",
            "--task",
            pairs,
            "--pooling",
            "first-last-avg",
            "--n-components",
            ",".join(settings),
            "--json",
            report,
        )
        == 0
    )
    (task,) = json.loads(report.read_text())["tasks"].values()
    assert ["%.4f" % result["splits"]["test"] for result in task["results"]] == [value for _, value in demo]

"""`make demo`, the README's main job, runs to the end: fit, evaluate and export on the sample
pairs, then serve_text from the reloaded SavedModel (a signature change once broke it)."""

import os
import subprocess
import sys

import pytest

from helpers import ROOT

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
    assert os.path.isfile(tmp_path / "demo" / "served" / "1" / "saved_model.pb")

"""Every ```bash and ```python block of README.md runs as written, in order, from a fresh clone
of this repository (its committed files: commit before running), with `.venv` linked from the
checkout's and `../shared` beside the clone as it is beside the checkout; and the quickstarts'
searches put the right sentence first. A user's first hour is these blocks: one that no longer
runs, or a search that ranks a bank above a coffee, fails here."""

import ast
import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT, SHARED, shared_data

pytestmark = pytest.mark.slow

BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```$", re.M | re.S)
TEXT = re.compile(r"^```text\n(.*?)^```$", re.M | re.S)
#: The blocks not run, each by a rule with its reason, and how many blocks each rule skips (a
#: block newly caught by a rule fails the test until it is counted here).
SKIPPED = {
    "installs (make, pip): CI has installed .venv": (re.compile(r"^\s*(make|pip)\s", re.M), 2),
    "fine-tunes (train: minutes per epoch; tests/test_training.py runs it)": (
        re.compile(r"bert-whitening train\s"),
        1,
    ),
}
#: The quickstarts' queries and the sample sentence each must find first.
FIRST_HITS = {
    "I would like a coffee": "I would love a hot cup of coffee",
    "Is the train station nearby?": "Is the railway station far from here?",
    "My mobile screen is broken": "I dropped my phone and cracked the screen",
}


def readme_blocks(text):
    """``[(language, code, skip rule or None)]`` in the README's order."""
    blocks = []
    for language, code in BLOCK.findall(text):
        rules = [name for name, (pattern, _) in SKIPPED.items() if pattern.search(code)]
        assert len(rules) <= 1, (rules, code)
        blocks.append((language, code, rules[0] if rules else None))
    return blocks


def test_every_readme_block_runs_from_a_fresh_clone(tmp_path):
    shared_data()  # skipped where ../shared/data is not beside the checkout (failed in CI)
    clone = tmp_path / "main"
    subprocess.run(["git", "clone", "--quiet", os.path.abspath(ROOT), str(clone)], check=True)
    venv = os.path.join(ROOT, ".venv")
    os.symlink(os.path.realpath(venv if os.path.isdir(venv) else sys.prefix), clone / ".venv")
    os.symlink(os.path.realpath(os.path.dirname(SHARED)), tmp_path / "shared")
    readme = (clone / "README.md").read_text(encoding="utf-8")
    blocks = readme_blocks(readme)
    skipped = [rule for _, _, rule in blocks if rule]
    assert {rule: skipped.count(rule) for rule in SKIPPED} == {rule: count for rule, (_, count) in SKIPPED.items()}
    environment = dict(os.environ, PYTHONPATH=str(clone))  # the clone's package, in every process
    printed = []
    for language, code, rule in blocks:
        if rule:
            continue
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [".venv/bin/python", "-"]
        result = subprocess.run(
            command,
            cwd=clone,
            env=environment,
            input=None if language == "bash" else code,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, "README block failed:\n%s\n%s" % (code, result.stderr[-3000:])
        printed.append((code, result.stdout))
    check_python_search(printed, readme)
    check_command_line_search(printed)


def check_python_search(printed, readme):
    """The Python quickstart prints ``query -> [(text, score), ...]``: the right sentence first,
    and the hits the README shows under it are those it printed."""
    (stdout,) = [out for code, out in printed if "index.search(" in code]
    hits = {}
    for line in stdout.splitlines():
        if " -> [" in line:
            query, listed = line.split(" -> ", 1)
            hits[query] = [text for text, _ in ast.literal_eval(listed)]
    assert hits and all(texts[0] == FIRST_HITS[query] for query, texts in hits.items()), stdout
    (shown,) = TEXT.findall(readme)
    shown_hits = {
        line.split(" -> ", 1)[0]: [text for text, _ in ast.literal_eval(line.split(" -> ", 1)[1])]
        for line in shown.splitlines()
    }
    assert shown_hits == hits


def check_command_line_search(printed):
    """``bert-whitening search`` prints ``query: Q`` and then its hits, ``rank score text``, best
    first: the right sentence first."""
    (stdout,) = [out for code, out in printed if "bert-whitening search" in code]
    first = {}
    query = None
    for line in stdout.splitlines():
        if line.startswith("query: "):
            query = line[len("query: ") :]
        elif query is not None and line.split()[:1] == ["1"]:
            first[query] = line.split(None, 2)[2]
    assert first == {query: FIRST_HITS[query] for query in first} and len(first) == 2, stdout

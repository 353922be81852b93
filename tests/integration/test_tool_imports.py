"""The benchmarks, scripts and eval/ import the package's names inside functions (TensorFlow
starts only when they run), where a renamed function breaks them only when someone runs them:
every name they import from the package exists."""

import ast
import glob
import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = sorted(
    os.path.relpath(path, ROOT)
    for folder in ("benchmarks", "scripts", "eval")
    for path in glob.glob(os.path.join(ROOT, folder, "*.py"))
)


def package_imports(path):
    """``(module, name)`` of every ``from bert_whitening... import name`` in the file, at any depth."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as stream:
        tree = ast.parse(stream.read())
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bert_whitening"
        for alias in node.names
    ]


def test_the_tools_are_found():
    assert {"benchmarks/bench_serving.py", "scripts/demo.py", "eval/eval.py"} <= set(TOOLS)
    assert ("bert_whitening.export", "export_saved_model") in package_imports("benchmarks/bench_serving.py")


@pytest.mark.parametrize("path", TOOLS)
def test_every_package_name_a_tool_imports_exists(path):
    for module, name in package_imports(path):
        found = importlib.import_module(module)
        if not hasattr(found, name):  # a submodule: from bert_whitening import encoding
            importlib.import_module(module + "." + name)

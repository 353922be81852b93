"""The package held to the shape it has reached (`scripts/shape.py`): each limit checked on this
checkout, and each shown to catch a package that breaks it."""

import importlib.util
import os

import pytest

from helpers import ROOT

spec = importlib.util.spec_from_file_location("shape", os.path.join(ROOT, "scripts", "shape.py"))
shape = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shape)

LIMITS = {
    "functions over 60 lines <= 3": lambda s: len(s.long_functions) <= 3,
    "no function over 10 parameters": lambda s: all(count <= 10 for _, _, count in s.many_parameters),
    "functions over 8 parameters <= 3": lambda s: len(s.many_parameters) <= 3,
    "bool checked in <= 2 modules": lambda s: len(s.bool_modules) <= 2,
    "JSON parsed in <= 3 places": lambda s: len(s.json_sites) <= 3,
    "top-level modules <= 23": lambda s: s.top_level_modules <= 23,
    "mirrored test files >= 90%": lambda s: s.tested >= 0.9 * len(s.modules),
    "cli.py <= 400 lines": lambda s: s.cli_lines <= 400,
}


def function(name, parameters=0, lines=1):
    arguments = ", ".join("a%d" % i for i in range(parameters))
    return "def %s(%s):\n" % (name, arguments) + "    x = 1\n" * (lines - 2) + "    return None\n"


#: For each limit, what a package that breaks it holds beside the good modules.
BREAKS = {
    "functions over 60 lines <= 3": {"a.py": "".join(function("f%d" % i, lines=61) for i in range(4))},
    "no function over 10 parameters": {"a.py": function("f", parameters=11)},
    "functions over 8 parameters <= 3": {"a.py": "".join(function("f%d" % i, parameters=9) for i in range(4))},
    "bool checked in <= 2 modules": {"b%d.py" % i: "isinstance(1, (int, bool))\n" for i in range(3)},
    "JSON parsed in <= 3 places": {"a.py": "import json\n" + "json.loads('1')\n" * 2 + "json.load(None)\n" * 2},
    "top-level modules <= 23": {"m%d.py" % i: "" for i in range(22)},
    "mirrored test files >= 90%": {"sub/untested.py": "", "sub/other.py": "", "sub/__init__.py": ""},
    "cli.py <= 400 lines": {"cli.py": "x = 1\n" * 401},
}


def package(root, modules):
    """A checkout at ``root``: ``modules`` (path -> text) in `bert_whitening/`, plus nine small
    tested modules, each with its test at the mirrored path."""
    for i in range(9):
        modules = {"good%d.py" % i: function("g"), **modules}
    for path, text in modules.items():
        target = root / "bert_whitening" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if path.startswith("good"):
            test = root / shape.mirrored_test(target.relative_to(root / "bert_whitening"))
            test.parent.mkdir(parents=True, exist_ok=True)
            test.write_text("", encoding="utf-8")
    return shape.measure(root)


@pytest.mark.parametrize("limit", LIMITS)
def test_the_package_keeps_to_the_limit(limit):
    measured = shape.measure(ROOT)
    assert LIMITS[limit](measured), "\n".join(shape.report(measured))


@pytest.mark.parametrize("limit", LIMITS)
def test_a_package_that_breaks_the_limit_is_caught(tmp_path, limit):
    assert all(check(package(tmp_path / "good", {})) for check in LIMITS.values())
    broken = package(tmp_path / "broken", BREAKS[limit])
    assert not LIMITS[limit](broken)


def test_a_test_file_counts_only_at_the_mirrored_path(tmp_path):
    measured = package(tmp_path, {"sub/__init__.py": "", "sub/mod.py": ""})
    assert measured.untested == [os.path.join("sub", "mod.py")]
    (tmp_path / "tests" / "test_mod.py").write_text("", encoding="utf-8")  # not mirrored
    assert shape.measure(tmp_path).untested == [os.path.join("sub", "mod.py")]
    (tmp_path / "tests" / "sub").mkdir()
    (tmp_path / "tests" / "sub" / "test_mod.py").write_text("", encoding="utf-8")
    assert shape.measure(tmp_path).untested == []

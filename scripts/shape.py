"""Print the shape figures of the package, measured from its syntax tree: long functions, functions
of many parameters, the modules that check for a bool and the places that parse JSON (each has one
home), the number of top-level modules, and which modules have a test file at their mirrored path
(`bert_whitening/a/b.py` -> `tests/a/test_b.py`, `bert_whitening/x.py` -> `tests/test_x.py`).

    .venv/bin/python scripts/shape.py [ROOT]

`tests/integration/test_shape.py` holds the package to the limits these figures reach now."""

import ast
import dataclasses
import sys
from pathlib import Path

LONG_FUNCTION = 60  # lines
MANY_PARAMETERS = 8
TOO_MANY_PARAMETERS = 10


@dataclasses.dataclass
class Shape:
    cli_lines: int = 0
    long_functions: list = dataclasses.field(default_factory=list)  # (path, name, lines)
    many_parameters: list = dataclasses.field(default_factory=list)  # (path, name, count)
    bool_modules: set = dataclasses.field(default_factory=set)
    json_sites: list = dataclasses.field(default_factory=list)
    top_level_modules: int = 0
    modules: list = dataclasses.field(default_factory=list)  # relative to the package, no __init__/__main__
    untested: list = dataclasses.field(default_factory=list)

    @property
    def tested(self):
        return len(self.modules) - len(self.untested)


def mirrored_test(module):
    """The test file of ``module`` (a path relative to the package): `tests/<subpackage>/test_<module>.py`."""
    return Path("tests", *module.parent.parts, "test_%s.py" % module.stem)


def _is_bool_check(call):
    """``isinstance(x, bool)`` (or a tuple naming bool or numpy's ``bool_``)."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "isinstance" and len(call.args) == 2):
        return False
    kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
    return any(
        (isinstance(kind, ast.Name) and kind.id == "bool") or (isinstance(kind, ast.Attribute) and kind.attr == "bool_")
        for kind in kinds
    )


def _is_json_parse(call):
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "json"
        and func.attr in ("load", "loads")
    )


def _measure_module(shape, path, where):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            count = len([a for a in arguments if a.arg not in ("self", "cls")])
            lines = node.end_lineno - node.lineno + 1
            if lines > LONG_FUNCTION:
                shape.long_functions.append((where, node.name, lines))
            if count > MANY_PARAMETERS:
                shape.many_parameters.append((where, node.name, count))
        elif isinstance(node, ast.Call):
            if _is_json_parse(node):
                shape.json_sites.append("%s:%d" % (where, node.lineno))
            if _is_bool_check(node):
                shape.bool_modules.add(where)


def measure(root):
    """The `Shape` of the checkout at ``root``."""
    root = Path(root)
    package = root / "bert_whitening"
    shape = Shape()
    for path in sorted(package.rglob("*.py")):
        _measure_module(shape, path, str(path.relative_to(root)))
        module = path.relative_to(package)
        if path.name not in ("__init__.py", "__main__.py"):
            shape.modules.append(module)
            if not (root / mirrored_test(module)).is_file():
                shape.untested.append(str(module))
    shape.top_level_modules = len(list(package.glob("*.py")))
    cli = package / "cli.py"
    shape.cli_lines = len(cli.read_text(encoding="utf-8").splitlines()) if cli.exists() else 0
    return shape


def report(shape):
    """The figures, one a line."""
    many = shape.many_parameters
    return [
        "cli.py lines: %d" % shape.cli_lines,
        "functions over %d lines: %d %s" % (LONG_FUNCTION, len(shape.long_functions), shape.long_functions),
        "functions over %d parameters: %d %s" % (MANY_PARAMETERS, len(many), many),
        "over %d parameters: %d" % (TOO_MANY_PARAMETERS, len([m for m in many if m[2] > TOO_MANY_PARAMETERS])),
        "modules with isinstance(..., bool): %d %s" % (len(shape.bool_modules), sorted(shape.bool_modules)),
        "json.load(s) call sites: %d %s" % (len(shape.json_sites), shape.json_sites),
        "top-level modules: %d" % shape.top_level_modules,
        "modules with a test file: %d/%d untested: %s" % (shape.tested, len(shape.modules), sorted(shape.untested)),
    ]


if __name__ == "__main__":
    print("\n".join(report(measure(sys.argv[1] if len(sys.argv) > 1 else "."))))

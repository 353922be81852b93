"""No import cycle between the package's modules, counting the imports inside functions too
(a lazy import that closes a loop, as ``config`` -> ``models`` -> ``config`` once did, is still
a loop: each module needs the other to be understood). A module's import of its own parent
package is left out: Python imports the parent first whatever the module says."""

import ast
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "bert_whitening")


def package_modules():
    """``{dotted name: path}`` of every module of the package."""
    found = {}
    for directory, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = ["bert_whitening"] + os.path.relpath(path, ROOT)[: -len(".py")].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path, modules):
    """The package modules the file at ``path`` imports anywhere in it (at the top or in a
    function), its own ancestor packages left out."""
    with open(path, encoding="utf-8") as stream:
        tree = ast.parse(stream.read())
    this = next(name for name, where in modules.items() if where == path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != this and not this.startswith(name + "."):
                found.add(name)
    return found


def cycles(graph):
    """The strongly connected components of ``graph`` with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    modules = package_modules()
    graph = {name: imports(path, modules) for name, path in modules.items()}
    assert "bert_whitening.models" in graph["bert_whitening.sentence_encoder"]  # lazy imports are seen
    assert cycles(graph) == []


def test_a_lazy_import_that_closes_a_loop_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

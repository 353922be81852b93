"""No import cycle between the package's modules, counting the imports inside functions too
(a lazy import that closes a loop, as ``config`` -> ``models`` -> ``config`` once did, is still
a loop: each module needs the other to be understood). A module's import of its own parent
package is left out: Python imports the parent first whatever the module says."""

import ast
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "bert_whitening")


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


#: The layers of the package, lowest first (../shared/DESIGN.md): a module imports only from its own
#: layer or below. A module is placed by its longest listed prefix.
LAYERS = {
    1: (
        "bert_whitening.io",
        "bert_whitening.errors",
        "bert_whitening.arguments",
        "bert_whitening.names",
        "bert_whitening.progress",
    ),
    2: (
        "bert_whitening.whitening",
        "bert_whitening.codes",
        "bert_whitening.vectors",
        "bert_whitening.precision",
        "bert_whitening.data",
        "bert_whitening.tokenization.token_ids",
        "bert_whitening.retrieval.benchmark",
        "bert_whitening.sentence_transformers_names",  # encode's keywords, output precisions, semantic_search
    ),
    3: ("bert_whitening.config", "bert_whitening.checkpoints"),
    4: (
        "bert_whitening.backend",
        "bert_whitening.tokenization.tokenizer",
        "bert_whitening.tokenization.graph_tokenizer",
        "bert_whitening.tokenization",
        "bert_whitening.layers",
        "bert_whitening.models",
        "bert_whitening.encoding",
        "bert_whitening.flow",
        "bert_whitening.losses",
        "bert_whitening.training.adam",
    ),
    5: (
        "bert_whitening.sentence_encoder",
        "bert_whitening.training",
        "bert_whitening.evaluation",
        "bert_whitening.retrieval",
        "bert_whitening.export",
        "bert_whitening.beam",
        "bert_whitening.serving",
        "bert_whitening.plots",  # the figures of the jobs' reports, labelled with their settings
        "bert_whitening.checkpoints.convert",  # convert-hf: reads a model as --model does, writes it anew
    ),
    6: ("bert_whitening.commands", "bert_whitening.cli", "bert_whitening.__main__"),
}


def layer_of(module):
    """The layer of ``module`` by its longest prefix in `LAYERS`; None for the package's own
    ``__init__`` (the names it offers are imported on first use)."""
    best = None
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (layer, prefix)
    return best and best[0]


def upward_imports(graph):
    """``(module, its layer, imported module, that layer)`` for each import of a higher layer."""
    found = []
    for module, imported in sorted(graph.items()):
        for other in sorted(imported):
            here, there = layer_of(module), layer_of(other)
            if here is not None and there is not None and there > here:
                found.append((module, here, other, there))
    return found


#: Imports of a higher layer still to be moved, each with what it is for; the test fails when one is
#: added and when one of these is gone (so the list is kept true).
KNOWN_UPWARD = {
    # TensorFlow's checkpoint reader and writer, imported when a checkpoint's weights are read or written
    ("bert_whitening.checkpoints.google", "bert_whitening.backend"),
}


def test_every_module_has_a_layer_and_imports_none_above_it():
    modules = package_modules()
    graph = {name: imports(path, modules) for name, path in modules.items()}
    unplaced = sorted(name for name in graph if name != "bert_whitening" and layer_of(name) is None)
    assert unplaced == []
    assert {(module, other) for module, _, other, _ in upward_imports(graph)} == KNOWN_UPWARD


def test_an_import_from_a_higher_layer_is_found():
    assert layer_of("bert_whitening.io.files") == 1 and layer_of("bert_whitening.training.adam") == 4
    assert layer_of("bert_whitening.training.loop") == 5
    found = upward_imports({"bert_whitening.whitening": {"bert_whitening.models", "bert_whitening.errors"}})
    assert found == [("bert_whitening.whitening", 2, "bert_whitening.models", 4)]

"""The Markdown pages' relative links resolve: files exist, anchors are headings (scripts/check_doc_links.py);
docs/cli.md quotes the usage the commands print."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_doc_links.py"


def _checker():
    spec = importlib.util.spec_from_file_location("check_doc_links", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slugs_are_githubs():
    checker = _checker()
    assert checker.slug("Semantic search: `serve_search` (`export --corpus`)") == (
        "semantic-search-serve_search-export---corpus"
    )
    assert checker.slug("100,000 sentences") == "100000-sentences"


def test_every_relative_link_of_the_docs_resolves(capsys):
    assert _checker().main([]) == 0, capsys.readouterr().out


def test_the_usage_lines_of_docs_cli_are_those_the_commands_print(monkeypatch):
    """docs/cli.md's "Every command's options" quotes each command's usage (``COLUMNS=100``): an
    option added to a command and not to the page fails here."""
    from bert_whitening import cli

    monkeypatch.setenv("COLUMNS", "100")
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = text.split("## Every command's options", 1)[1].split("```\n", 2)[1]
    quoted = {}
    for line in block.splitlines():
        if line.startswith("bert-whitening "):
            name = line.split()[1]
        quoted[name] = quoted.get(name, "") + line + "\n"
    commands = [action for action in cli.build_parser()._actions if hasattr(action, "choices") and action.choices]
    parsers = next(action.choices for action in commands if "fit" in action.choices)
    assert set(quoted) <= set(parsers)
    for name, usage in quoted.items():
        assert "usage: " + usage == parsers[name].format_usage(), name

"""The Markdown pages' relative links resolve: files exist, anchors are headings (scripts/check_doc_links.py)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_doc_links.py"


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

"""Check the relative links of the Markdown pages: every ``](path)`` and ``](path#anchor)`` target exists,
and every anchor is a heading of its target (GitHub's slugs). Prints one line per broken link; exit status 1
if there is any.

    .venv/bin/python scripts/check_doc_links.py [FILE.md ...]   # default: README.md, CONTRIBUTING.md, docs/*.md
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, line


def anchors(path):
    seen, found = {}, set()
    for _, line in lines_outside_code(path):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def broken_links(page):
    for number, line in lines_outside_code(page):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                yield "%s:%d: %s: no such file" % (page.relative_to(ROOT), number, target)
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                yield "%s:%d: %s: no heading with that anchor" % (page.relative_to(ROOT), number, target)


def main(argv):
    pages = [Path(a).resolve() for a in argv] or [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    problems = [problem for page in pages if page.exists() for problem in broken_links(page)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Every repository path a Markdown file names exists: the docs stay true to the tree.

A path is a backticked token or a link target that starts with one of the repository's
top-level entries (``oracle/…``, ``impl/…``, ``README.md`` …). Patterns are skipped:
placeholders (``<model>``), globs (``*``), alternatives (``{md,json}``), and what runs
write (``reports/``, ``.nox/``). A path is looked up beside the Markdown file first
(an adapter's README names its own files), then from the repository root.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".nox", ".tox", "node_modules", "reports", ".venv", "build", "dist"}
GENERATED = ("reports/", ".nox/", ".tox/", "node_modules/")
TOKEN = re.compile(r"`([^`\s]+)`|\]\(([^)\s#]+)(?:#[^)]*)?\)")


def markdown_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md") if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts[:-1]))


def named_paths(text: str, top_level: set[str]) -> set[str]:
    """The repository paths ``text`` names (see the module docstring)."""
    found = set()
    for match in TOKEN.finditer(text):
        token = (match.group(1) or match.group(2)).rstrip(".,:;")
        token = token.split("::", 1)[0]  # tests/x.py::test_name
        if any(c in token for c in "<>*{}$|") or token.startswith(("http:", "https:", "/", "~")):
            continue
        if token.startswith(GENERATED) or ("/" not in token and "." not in token):
            continue
        head = token.split("/", 1)[0]
        if head in top_level:
            found.add(token)
    return found


def test_every_path_named_in_the_docs_exists() -> None:
    top_level = {p.name for p in ROOT.iterdir() if p.name not in SKIP_DIRS}
    missing = []
    for doc in markdown_files():
        for token in sorted(named_paths(doc.read_text(encoding="utf-8"), top_level)):
            if not ((doc.parent / token).exists() or (ROOT / token).exists()):
                missing.append(f"{doc.relative_to(ROOT)}: {token}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_a_missing_path_is_found() -> None:
    """The scan sees both forms of reference, and skips patterns and generated files."""
    top = {"impl", "README.md", "reports"}
    text = (
        "see `impl/http.py`, [the adapter](impl/lifeline.py#x), `impl/<engine>/engine.toml`, `reports/x.md`"
    )
    assert named_paths(text, top) == {"impl/http.py", "impl/lifeline.py"}

"""README's statement of what ``specgate search --budget`` bounds is the session's rule
(issue 35: it said the budget bounds the search itself, but an 8-minute budget searched
309 s of a 370 s command): the search's share, the minimizing bounds per root cause and
the arithmetic of its example are ``specgate.search.search_session``'s."""

from __future__ import annotations

import re
from pathlib import Path

from specgate.search import search_session as session

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_the_readme_says_what_the_search_budget_bounds() -> None:
    text = " ".join(README.split())
    statement = text[text.index("`--budget` is the wall time") :][:800]
    assert re.search(rf"the first {session.SEARCH_SHARE:.0%} of it generates and compares inputs", statement)
    floor, most = f"{session.MINIMIZE_FLOOR:g}", f"{session.MINIMIZE_SECONDS:g}"
    assert f"({floor} to {most} s each)" in statement and f"gets {floor} s of minimizing" in statement
    searched = re.search(r"an 8-minute budget: about (\d+) s of searching", statement)
    assert searched and int(searched[1]) == round(8 * 60 * session.SEARCH_SHARE), statement
    assert "bounds the\nsearch itself" not in README and "bounds the search itself" not in text

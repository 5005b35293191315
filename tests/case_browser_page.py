"""The HTML report's case browser as a test drives it in headless chromium
(``tests/cdp.py``): open a page, read what it shows, set its filters and search, open a
case, take a screenshot. Shared by the case-browser tests (``tests/reports/test_case_browser*.py``)."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tests.cdp import Chromium

_SHOWN_ROWS = "[...document.querySelectorAll('#cases tr.case')].filter(r => !r.hidden)"


class CaseBrowser:
    """One report page loaded in a chromium tab; ``seconds`` is how long it took to load."""

    def __init__(self, browser: Chromium, seconds: float) -> None:
        self.browser, self.seconds = browser, seconds

    def js(self, expression: str) -> object:
        return self.browser.js(expression)

    def shown(self) -> tuple[str, int]:
        """The page's own count line and the number of case rows actually shown."""
        return self.browser.js("document.getElementById('case-shown').textContent"), self.browser.js(
            f"{_SHOWN_ROWS}.length"
        )

    def shown_nodeids(self) -> list[str]:
        """The node ids of the case rows shown, in page order."""
        return self.browser.js(f"{_SHOWN_ROWS}.map(r => r.querySelector('.nodeid').textContent)")

    def select(self, name: str, value: str) -> None:
        """Choose ``value`` in the select ``name`` (a filter or the sort), as a user would."""
        self.browser.js(
            f"(() => {{ const s = document.getElementById({name!r}); s.value = {value!r};"
            " s.dispatchEvent(new Event('change')); })()"
        )

    def search(self, text: str) -> None:
        """Type ``text`` into the search box."""
        self.browser.js(
            f"(() => {{ const s = document.getElementById('c-search'); s.value = {json.dumps(text)};"
            " s.dispatchEvent(new Event('input')); })()"
        )

    def check_filter(self, name: str, counts: Counter[str]) -> None:
        """Each value of the filter ``name`` shows exactly its ``counts`` of cases (the count
        line says so too); cleared, the filter shows them all again."""
        n = sum(counts.values())
        for value, count in counts.items():
            self.select(name, value)
            assert self.shown() == (f"{count} of {n} cases shown", count), (name, value)
        self.select(name, "")
        assert self.shown() == (f"{n} of {n} cases shown", n), name

    def open_first_shown(self) -> str:
        """Click the first case row shown; the text of the detail it opens."""
        self.browser.js("document.querySelector('#cases tr.case:not([hidden])').click()")
        return self.browser.js("document.querySelector('#cases tr.detail').innerText")

    def screenshot(self, path: Path) -> Path:
        """The case browser scrolled into view, shot to ``path`` (a real picture, not blank)."""
        self.browser.js("document.getElementById('browser').scrollIntoView()")
        shot = self.browser.screenshot(path)
        assert shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
        return shot


@contextlib.contextmanager
def case_browser(binary: str, page: Path, profile: Path) -> Iterator[CaseBrowser]:
    """The report ``page`` loaded in a headless chromium (``binary``, profile folder
    ``profile``), closed after the block."""
    browser = Chromium(binary, profile)
    try:
        yield CaseBrowser(browser, browser.load(page.as_uri()))
    finally:
        browser.close()

"""The HTML report's page link in a real headless chromium (issue 25): hostile
addresses — malformed percent-encoding, a lone ``%``, a very long fragment, markup —
leave the filters working and inject nothing. The page is a real run's report (the
``markup`` hostile engine: encode errors, render refusals, messages full of live
Markdown and HTML), driven over the DevTools protocol (``tests/cdp.py``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.cdp import Chromium
from tests.engines.parity_run import run_parity
from tests.engines.test_hostile_answers import VOCAB_MODEL, hostile, ref
from tests.reports.test_report_html import chromium

MARKUP = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"


def state(browser: Chromium) -> dict:
    """The filters' values, the matrix rows shown, the page's own count line, and
    what could have been injected."""
    return browser.js(
        """(() => ({
  stage: document.getElementById('f-stage').value,
  model: document.getElementById('f-model').value,
  outcome: document.getElementById('f-outcome').value,
  shown: [...document.querySelectorAll('tr.row')].filter(r => !r.hidden).map(r => r.dataset.stage),
  count: document.getElementById('shown').textContent,
  images: document.querySelectorAll('img').length,
  scripts: document.querySelectorAll('script').length,
  onerror: document.querySelectorAll('[onerror]').length,
  pwned: window.__pwned === undefined ? null : window.__pwned,
}))()"""
    )


def page_errors(browser: Chromium) -> list[str]:
    """Uncaught exceptions of the page's scripts since the last load."""
    return [
        e["params"]["exceptionDetails"].get("text", "")
        + " "
        + str(e["params"]["exceptionDetails"].get("exception"))
        for e in browser.events
        if e.get("method") == "Runtime.exceptionThrown"
    ]


def open_page(browser: Chromium, url: str) -> None:
    browser.load("about:blank")  # a new document each time: a hash change alone does not reload
    browser.load(url)


@pytest.mark.slow
def test_hostile_page_links_leave_the_filters_working_in_chromium(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """main before the fix: ``#stage=%E0%A4%A`` threw in ``decodeURIComponent`` inside
    the DOMContentLoaded handler, so no filter was applied or wired up."""
    binary = chromium(request.config)
    ref(VOCAB_MODEL)
    run = run_parity(
        tmp_path, hostile("markup"), "encode,render", VOCAB_MODEL, "--max-cases", "2", "--shrink-budget", "0"
    )
    assert run.status == 1, run.output[-3000:]
    (page,) = (tmp_path / "reports").glob("parity-*.html")
    matrix = run.report["matrix"]
    erring = sorted(r["stage"] for r in matrix if r["error"] > 0)
    every = sorted(r["stage"] for r in matrix)
    assert erring and erring != every, matrix  # the outcome filter must visibly choose rows
    uri = page.as_uri()

    browser = Chromium(binary, tmp_path / "profile")
    try:
        open_page(browser, uri)
        clean = state(browser)
        assert not page_errors(browser) and sorted(clean["shown"]) == every, clean

        hostile_hashes = {
            "malformed percent-encoding": "#stage=%E0%A4%A&outcome=error&model=%ZZ&junk&=x",
            "a lone percent sign": "#%&outcome=error",
            "very long": "#stage=" + "%E0%A4%A" * 60_000 + "&outcome=error&" + "x" * 200_000,
            "raw markup": "#stage=" + MARKUP + "&outcome=error",
            "encoded markup": "#stage="
            + quote(MARKUP, safe="")
            + "&outcome=error&"
            + quote(MARKUP, safe="")
            + "=1",
        }
        for why, fragment in hostile_hashes.items():
            open_page(browser, uri + fragment)
            got = state(browser)
            assert not page_errors(browser), (why, page_errors(browser))
            # the valid part of the link applied, the rest ignored; the page's own count line ran
            assert got["outcome"] == "error" and got["stage"] == "" and got["model"] == "", (why, got)
            assert sorted(got["shown"]) == erring, (why, got)
            assert got["count"].startswith(f"{len(erring)} rows"), (why, got)
            # nothing injected: the same elements as without a hash, no handler ran
            assert (got["images"], got["scripts"], got["onerror"]) == (
                clean["images"], clean["scripts"], clean["onerror"]
            ), (why, got, clean)  # fmt: skip
            assert got["pwned"] is None, (why, got)
            # and the filters are still live: a change re-filters and rewrites the address
            browser.js(
                "(() => { const s = document.getElementById('f-outcome'); s.value = '';"
                " s.dispatchEvent(new Event('change')); })()"
            )
            assert sorted(state(browser)["shown"]) == every, why
            assert browser.js("location.hash") == "", why
            print(f"{why}: {len(fragment):,}-character fragment, {len(erring)} of {len(every)} rows shown")

        open_page(browser, uri + hostile_hashes["malformed percent-encoding"])
        shot = browser.screenshot(tmp_path / "hostile-hash.png")
        assert shot.stat().st_size > 10_000, "the screenshot is (nearly) empty"
        print(f"screenshot: {shot}")
    finally:
        browser.close()

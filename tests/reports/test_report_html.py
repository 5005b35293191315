"""The HTML report in a real headless browser (Debian's ``chromium``).

A real parity run of a mutant engine (the chat-template one: a few seconds) writes
its reports; chromium loads the HTML page, runs its script, and the DOM it dumps
must hold the JSON report's matrix counts, its root-cause groups, and — with a
filter preset in the address — show exactly the rows and groups the filter selects.
A screenshot is written beside the reports.

Without chromium the test is skipped with the reason — except in CI (``CI`` set) or
under ``--live-references``, where a missing browser is a broken setup and fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specgate.outcomes.gate import OUTCOMES
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity, script_impl

MUTANT = Path(__file__).resolve().parents[1] / "engines" / "mutants" / "template_swallow_chatml.py"
MODEL = "qwen3-vocab"


def chromium(config: pytest.Config) -> str:
    for name in (os.environ.get("SPECGATE_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    reason = "no chromium installed (apt-get install chromium, or set SPECGATE_CHROMIUM)"
    if os.environ.get("CI") or config.getoption("--live-references"):
        pytest.fail(f"{reason}: the HTML report must be checked in CI", pytrace=False)
    pytest.skip(reason)


def browse(browser: str, url: str, profile: Path, *args: str) -> str:
    """What headless chromium gives for ``url`` (its DOM after the scripts ran, with --dump-dom)."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *args, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


class Dom(HTMLParser):
    """The matrix rows (stage, model, hidden, {outcome: count}) and groups (id, hidden, count) of a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self.groups: list[dict] = []
        self.shown = ""
        self._cell: str | None = None
        self._into: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "tr" and "row" in classes:
            self.rows.append(
                {"stage": a["data-stage"], "model": a["data-model"], "hidden": "hidden" in a, "n": {}}
            )
        elif tag == "td" and "count" in classes:
            self._cell = a["data-outcome"]
        elif tag == "section" and "group" in classes:
            self.groups.append({"id": a["id"].removeprefix("g-"), "hidden": "hidden" in a, "count": None})
        elif tag == "span" and "group-count" in classes:
            self._into = "group-count"
        elif tag == "span" and a.get("id") == "shown":
            self._into = "shown"

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.rows[-1]["n"][self._cell] = int(data)
            self._cell = None
        elif self._into == "group-count":
            self.groups[-1]["count"] = int(data)
            self._into = None
        elif self._into == "shown":
            self.shown, self._into = data, None


@pytest.mark.slow
def test_html_report_in_a_real_browser(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    browser = chromium(request.config)
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")
    run = run_parity(
        tmp_path,
        script_impl(MUTANT),
        "metadata,render",
        MODEL,
        files=("specgate/gates/test_render.py", "specgate/gates/test_metadata.py"),
    )
    assert run.status == 1, run.output[-3000:]
    (page,) = (tmp_path / "reports").glob("parity-*.html")
    report = run.report
    assert any(g["reproducer"] for g in report["groups"]), "the run must have a reproducer to show"

    dom = Dom(browse(browser, page.as_uri(), tmp_path / "profile", "--dump-dom"))
    counts = {(r["stage"], r["model"]): r["n"] for r in dom.rows}
    expected = {(row["stage"], row["model"]): {o: row[o] for o in OUTCOMES} for row in report["matrix"]}
    assert counts == expected
    assert len(dom.rows) == len(report["matrix"])
    assert [(g["id"], g["count"]) for g in dom.groups] == [(g["id"], g["count"]) for g in report["groups"]]
    assert not any(r["hidden"] for r in dom.rows) and not any(g["hidden"] for g in dom.groups)

    # A filter preset in the address: only the rows with failures and the failing groups stay visible.
    filtered = Dom(browse(browser, page.as_uri() + "#outcome=fail", tmp_path / "profile", "--dump-dom"))
    visible_rows = {(r["stage"], r["model"]) for r in filtered.rows if not r["hidden"]}
    assert visible_rows == {(r["stage"], r["model"]) for r in report["matrix"] if r["fail"] > 0}
    assert 0 < len(visible_rows) < len(report["matrix"])
    visible_groups = [g["id"] for g in filtered.groups if not g["hidden"]]
    assert visible_groups == [g["id"] for g in report["groups"] if g["outcome"] == "fail"]
    assert filtered.shown == f"{len(visible_rows)} rows, {len(visible_groups)} groups shown"

    # Another: one stage; the render group is hidden with the render rows.
    by_stage = Dom(browse(browser, page.as_uri() + "#stage=metadata", tmp_path / "profile", "--dump-dom"))
    assert [r["stage"] for r in by_stage.rows if not r["hidden"]] == ["metadata"]
    assert [g["id"] for g in by_stage.groups if not g["hidden"]] == []

    shot = page.with_suffix(".png").with_name(page.stem + "-browser.png")
    browse(browser, page.as_uri(), tmp_path / "profile", "--window-size=1200,1000", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000, "the screenshot is (nearly) empty"
    print(f"screenshot: {shot}")

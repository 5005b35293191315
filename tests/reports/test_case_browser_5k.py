"""The case browser at more than 5,000 cases (issue 27): two real runs of planted
engines over the tokenizer stages of every cached vocabulary model, their JSON reports
joined into one page, loaded in headless chromium. The case counts equal the JSON's,
the filters and the search work, a failing case shows the engine's own answer; the
page's size and load time are printed (bounded generously, never timed)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.reports import html as report_html
from specgate.supply import models as model_cache
from tests.case_browser_page import case_browser
from tests.engines.parity_run import run_parity, script_impl
from tests.reports.test_report_html import chromium

ENGINES = Path(__file__).resolve().parents[1] / "engines"
MODELS = ("qwen3-vocab", "qwen3.6-vocab", "qwen2.5-coder-0.5b-instruct", "deepseek-r1-distill-qwen-7b-vocab")
RUNS = {  # name -> (engine script and its arguments)
    "browser": (ENGINES / "browser_engine.py",),
    "fixable": (ENGINES / "fixable_tokenizer.py", "--defects=nfc,digits3,fffd"),
}
#: Generous bounds: a page per case and a load that no contended machine should reach.
BYTES_PER_CASE = 4096
LOAD_SECONDS = 120


def joined(reports: dict[str, dict]) -> dict:
    """One payload of several runs' JSON reports: each case's id prefixed with its run's
    name (the runs gate the same cases), its matrix rows, groups and details kept."""
    cases, details, matrix, groups = [], [], [], []
    for name, report in reports.items():
        cases += [{**c, "nodeid": f"{name}::{c['nodeid']}"} for c in report["cases"]]
        details += report["case_details"]
        matrix += report["matrix"]
        groups += report["groups"]
    coverage = Counter(c["outcome"] for c in cases)
    return {"impl": " + ".join(r["impl"] for r in reports.values()), "matrix": matrix, "groups": groups,
            "coverage": dict(coverage), "verdict": None, "cases": cases, "case_details": details}  # fmt: skip


@pytest.mark.slow
def test_the_case_browser_at_5000_cases(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary = chromium(request.config)
    missing = [m for m in MODELS if m not in model_cache.cached_models()]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch")
    reports = {}
    for name, (script, *args) in RUNS.items():
        run = run_parity(
            tmp_path / name, script_impl(script, *args), "split,encode,decode", ",".join(MODELS),
            "--shrink-budget", "0", "--diagnose-budget", "0",
        )  # fmt: skip
        assert run.status == 1 and run.report["cases"], run.output[-3000:]
        reports[name] = run.report
    payload = joined(reports)
    cases = payload["cases"]
    n = len(cases)
    assert n >= 5000, n
    json_path = tmp_path / "joined.json"
    json_path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    started = time.monotonic()
    html = report_html.page(json.loads(json_path.read_text(encoding="utf-8")))
    built = time.monotonic() - started
    page = tmp_path / "joined.html"
    page.write_text(html, encoding="utf-8")
    size = page.stat().st_size
    assert size < BYTES_PER_CASE * n, size

    with case_browser(binary, page, tmp_path / "profile") as browser:
        print(
            f"{n:,} cases; HTML {size:,} bytes ({size / n:,.0f} per case), JSON {json_path.stat().st_size:,} bytes; "
            f"page built in {built:.2f} s, loaded in chromium in {browser.seconds:.2f} s"
        )
        assert browser.seconds < LOAD_SECONDS, browser.seconds
        assert browser.shown() == (f"{n} of {n} cases shown", n)
        for name, field in (("f-outcome", "outcome"), ("f-model", "model"), ("f-stage", "stage")):
            browser.check_filter(name, Counter(c[field] for c in cases))

        # search: one failing case of the second run by its id, then a text only in
        # the engine answers (a token the NFC engine composes)
        failing = next(c for c in cases if c["outcome"] == "fail" and c["nodeid"].startswith("fixable::"))
        browser.search(failing["nodeid"])
        assert browser.shown()[1] == 1
        detail = browser.open_first_shown()
        assert "the engine's answer:\n" in detail and "(not recorded)" not in detail, detail
        assert failing["answers"]["engine"].split("\n")[0].replace(" ", "·") in detail, detail
        browser.search("")
        assert browser.shown()[1] == n
        browser.screenshot(tmp_path / "case-browser-5k.png")

"""The HTML report's case browser (issue 27): every case of a real run, filterable,
searchable and sortable in a real headless chromium driven over the DevTools
protocol (``tests/cdp.py``); and its size bound, without a browser."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from specgate.outcomes.verdict import GateRecord
from specgate.plugin import model_missing
from specgate.reports import browser as report_browser
from specgate.reports import html as report_html
from specgate.supply import models as model_cache
from tests.case_browser_page import case_browser
from tests.engines.parity_run import run_parity, script_impl
from tests.reports.test_report_html import chromium

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "browser_engine.py"
MODEL = "qwen3-vocab"


def test_every_shown_value_is_capped_and_the_page_stays_proportional() -> None:
    """5,000 cases, each with a 50,000-character message: each value is cut with a
    visible marker, and the page stays within a per-case bound."""
    huge = "x" * 50_000
    kept = {"engine": huge, "reference": huge, "diff": huge, "where": huge}  # a report is input too
    records = [
        GateRecord("encode", MODEL, "fail", f"t::test_encode[{MODEL}-combining-acute/plain-{i}]", huge, {}, "combining-acute/plain", kept)
        for i in range(5000)
    ]  # fmt: skip
    details = report_browser.case_details(records)
    assert details[0]["input"].startswith("cafe\u0301".replace("\u0301", "\\u0301")), details[0]
    payload = {"impl": "x", "matrix": [], "groups": [], "coverage": {}, "verdict": [],
               "cases": [r.__dict__ for r in records], "case_details": details}  # fmt: skip
    html = report_html.page(payload)
    per_case = 7 * report_browser.SHOWN_CHARS + 400  # message, input, both answers, diff, site, row ids
    assert len(html.encode()) < 5000 * per_case, len(html)
    data = json.loads(
        re.search(r'<script type="application/json" id="case-data">(.*?)</script>', html, re.S)[1]
    )
    assert len(data) == 5000
    assert all(len(value) <= report_browser.SHOWN_CHARS + 40 for row in data for value in row)
    assert "characters cut]" in data[0][4]


@pytest.mark.slow
def test_every_case_has_its_own_anchor() -> None:
    """Issue 35: a link per case. Each row carries an anchor made from its node id: one per
    case (distinct node ids, distinct anchors), an HTML id (no whitespace)."""
    nodeids = [f"t::test_encode[{MODEL}-ws-{i}]" for i in range(3)]
    nodeids += ["t::test_x[a b#c]", "t::test_x[a_b_c]", "t::test_x[a%20.b#c]", "t::test_x[a\tb#c]"]
    payload = {
        "cases": [GateRecord("encode", MODEL, "fail", n, "m").__dict__ for n in nodeids],
        "case_details": [],
    }
    anchors = [row[-1] for row in report_browser._rows(payload)]
    assert anchors[:3] == [f"case-{n}" for n in nodeids[:3]]
    assert not any(re.search(r"[\s#]", a) for a in anchors), anchors
    assert len(set(anchors)) == len(nodeids), anchors


@pytest.mark.slow  # a real chromium: the live session installs it (noxfile.ensure_chromium)
def test_the_case_browser_in_a_real_browser(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary = chromium(request.config)
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")
    run = run_parity(tmp_path, script_impl(ENGINE), "split,encode,decode", MODEL)
    assert run.status == 1, run.output[-3000:]
    (page,) = (tmp_path / "reports").glob("parity-*.html")
    cases = run.report["cases"]
    n = len(cases)
    outcomes = Counter(c["outcome"] for c in cases)
    assert outcomes["fail"] and outcomes["refused"] and outcomes["pass"], outcomes

    with case_browser(binary, page, tmp_path / "profile") as browser:
        assert browser.seconds < 120, browser.seconds
        print(f"{n} cases, {page.stat().st_size:,} bytes, loaded in {browser.seconds:.2f} s")
        assert browser.shown() == (f"{n} of {n} cases shown", n)

        # the outcome, stage and model selects (the page's filters) choose the rows
        browser.check_filter("f-outcome", outcomes)
        browser.check_filter("f-stage", Counter(c["stage"] for c in cases))
        browser.check_filter("f-model", Counter({MODEL: n}))

        # search: a case id of a failing split case finds its cases and nothing else
        failing = next(c for c in cases if c["outcome"] == "fail" and c["stage"] == "split")
        browser.search(failing["case"])
        rows = browser.shown_nodeids()
        assert failing["nodeid"] in rows and all(failing["case"] in r for r in rows), rows
        browser.search("")
        browser.select("f-outcome", "fail")
        term = failing["case"].split("/")[0]
        browser.search(term)
        rows = browser.shown_nodeids()
        expected = [c["nodeid"] for c in cases if c["outcome"] == "fail" and term in c["nodeid"]]
        assert sorted(rows) == sorted(expected) and len(rows) >= 2, (term, rows)

        # a click opens a case: its input with the combining accent escaped, the
        # reference's ids, the first divergence
        browser.search("combining-acute/plain")
        browser.select("f-outcome", "")
        detail = browser.open_first_shown()
        assert "cafe\\u0301" in detail and "\u0301" not in detail, detail
        assert re.search(r"the reference's answer:\n\[\d+,", detail), detail  # its ids

        # a failing case shows the engine's own answer next to the reference's, windowed
        # at the first divergence (marked ▶), and their diff with visible whitespace
        browser.search(failing["nodeid"])
        browser.select("f-outcome", "")
        detail = browser.open_first_shown()
        engine = detail.split("the engine's answer:\n", 1)[1]
        assert engine.startswith(("▶", "·", "…")) and "▶" in engine.split("the first divergence")[0], detail
        assert "in a whitespace run" in detail and "\n-▶·" in detail and "\n+▶·" in detail, detail
        # the message in plain spaces (issue 35: a · for every space), the diff's kept visible
        message = detail.split("the first divergence", 1)[1].split("diff (", 1)[0]
        # (" · " between the parts of the divergence site is a separator, not a space shown)
        assert "·" not in message.rstrip("\n").replace("·\n", "\n").replace(" · ", " "), message

        # every case has a link: its anchor opens it, whatever the filters showed
        browser.search("")
        browser.select("f-outcome", "pass")
        anchor = browser.js(f"[...document.querySelectorAll('#cases tr.case')].find(r => r.querySelector('.nodeid')"
                            f".textContent === {json.dumps(failing['nodeid'])}).querySelector('a.here').getAttribute('href')")  # fmt: skip
        assert anchor.startswith("#case-"), anchor
        browser.js(f"location.hash = {json.dumps(anchor)}")
        opened = browser.js(f"(() => {{ const tr = document.getElementById(decodeURIComponent({json.dumps(anchor[1:])}));"
                            " return !tr.hidden && tr.nextElementSibling.classList.contains('detail'); })()")  # fmt: skip
        assert opened, anchor
        browser.select("f-outcome", "")

        # sort by outcome: the visible rows come in order
        browser.search("")
        browser.select("c-sort", "2")
        order = browser.js(
            "[...document.querySelectorAll('#cases tr.case')].map(r => r.cells[0].textContent)"
        )
        assert order == sorted(order) and len(order) == n

        # refusals, grouped with their message
        groups = browser.js(
            "[...document.querySelectorAll('details.refusal')].map(d => [Number(d.querySelector('.refusal-count').textContent), d.querySelector('summary').textContent])"
        )
        assert sum(count for count, _ in groups) == outcomes["refused"], groups
        assert any("decode of more than 40 ids" in text for _, text in groups), groups

        browser.select("f-outcome", "fail")
        browser.screenshot(tmp_path / "case-browser.png")

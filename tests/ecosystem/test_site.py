"""The ecosystem table as a static site (``specgate.ecosystem.site``, issue 37): an index with
the engines × stages matrix and the published root causes, a page per engine with its case
browser; opened from the file system in a real headless chromium (``tests/cdp.py``).

The saved table is ``saved_table/reports/``: what a real run of the runner wrote
(``specgate.ecosystem.run_all`` on ``impl/ecosystem/{hf_jinja,hf_tokenizers}``, each gated
by its real adapter on its real engine, ``--max-cases 25``), only its two engines' JSON
reports kept beside the table and this machine's paths cut out of them. Its Markdown is that
run's own, so the site's counts are checked against three things written independently:
the JSON's saved counts, the Markdown's table and each engine's report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specgate import ecosystem
from specgate.ecosystem.cli import main
from specgate.outcomes.gate import HEADINGS, OUTCOMES
from tests.cdp import Chromium
from tests.ecosystem.engines import wrong_engine
from tests.reports.test_report_html import chromium

SAVED = Path(__file__).resolve().parent / "saved_table"
STEM = "ecosystem-hf_jinja+hf_tokenizers"
FAST = ["--max-cases", "3", "--shrink-budget", "5"]


def saved_copy(tmp_path: Path) -> Path:
    """The saved table copied where nothing else lies (its reports beside it, as a run leaves them)."""
    shutil.copytree(SAVED, tmp_path / "saved")
    return tmp_path / "saved" / "reports" / f"{STEM}.json"


def build_site(saved: Path, out: Path) -> subprocess.CompletedProcess:
    """``python -m specgate.ecosystem site SAVED --out OUT``, as the lead runs it."""
    return subprocess.run(
        [sys.executable, "-m", "specgate.ecosystem", "site", str(saved), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def json_counts(saved: Path) -> dict[tuple[str, str], dict[str, int]]:
    """(engine key, stage) -> the count of every outcome, as the saved table's JSON holds them."""
    data = json.loads(saved.read_text(encoding="utf-8"))
    return {
        (row["key"], stage): {o: int(c.get(o, 0)) for o in OUTCOMES}
        for row in data["rows"]
        for stage, c in row["counts"].items()
    }


def markdown_counts(saved: Path) -> dict[tuple[str, str], dict[str, int]]:
    """The same from the run's Markdown: its "Engines × stages" table, engines by name."""
    data = json.loads(saved.read_text(encoding="utf-8"))
    key = {row["name"]: row["key"] for row in data["rows"]}
    text = saved.with_suffix(".md").read_text(encoding="utf-8")
    body = text.split("## Engines × stages", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == ["engine", "stage", *HEADINGS], head
    out = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[(key[cells[0]], cells[1])] = {o: int(n) for o, n in zip(OUTCOMES, cells[2:], strict=True)}
    return out


def report_cases(saved: Path) -> dict[str, int]:
    """Each engine's number of cases, from its own report file."""
    data = json.loads(saved.read_text(encoding="utf-8"))
    base = saved.parent.parent
    return {
        row["key"]: sum(
            len(json.loads((base / name).read_text(encoding="utf-8"))["cases"])
            for name in row["report_files"]
        )
        for row in data["rows"]
    }


class Matrix(HTMLParser):
    """The index's matrix as a page parser reads it: (engine, stage) -> {outcome: count}."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], dict[str, int]] = {}
        self._row: tuple[str, str] | None = None
        self._outcome: str | None = None
        self._in_matrix = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table":
            self._in_matrix = a.get("id") == "matrix"
        elif tag == "tr" and self._in_matrix and "data-engine" in a:
            self._row = (a["data-engine"], a["data-stage"])
            self.cells[self._row] = {}
        elif tag == "td" and self._row and "data-outcome" in a:
            self._outcome = a["data-outcome"]

    def handle_data(self, data: str) -> None:
        if self._row and self._outcome:
            self.cells[self._row][self._outcome] = int(data)
            self._outcome = None


def test_the_index_counts_equal_the_json_and_the_markdown(tmp_path: Path) -> None:
    saved = saved_copy(tmp_path)
    site(saved, tmp_path / "site")
    expected = json_counts(saved)
    assert len(expected) >= 4 and sum(n for c in expected.values() for n in c.values()) > 50, expected
    assert markdown_counts(saved) == expected
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert Matrix(index).cells == expected


@pytest.mark.slow  # a real gate run and its confirm script: ~35 s on a busy 2-core machine
def test_the_site_is_the_tables_own_files_rebuilt_the_same(tmp_path: Path) -> None:
    """A real run (a real gate run of a wrong engine) writes the site beside the table; the
    ``site`` subcommand rebuilds the same pages from the saved JSON alone, its reports named
    relative to the reports' parent (the saved table holds no absolute path)."""
    root = tmp_path / "engines"
    wrong_engine(root, "wrong", confirm_says="REPRODUCES")
    out = tmp_path / "run" / "reports"
    table = ecosystem.run_all(root, out, budget=300, extra=FAST)
    assert [r.status for r in table.rows] == ["ran"], [(r.key, r.message) for r in table.rows]
    site = out / "ecosystem-site"
    saved = json.loads((out / "ecosystem.json").read_text(encoding="utf-8"))
    (name,) = saved["rows"][0]["report_files"]
    assert name.startswith("reports/ecosystem/wrong/parity-"), name
    rebuilt = tmp_path / "rebuilt"
    built = build_site(out / "ecosystem.json", rebuilt)
    assert built.returncode == 0, built.stderr
    for page in ("index.html", "engines/wrong.html"):
        assert (rebuilt / page).read_text(encoding="utf-8") == (site / page).read_text(encoding="utf-8"), page
    assert 'href="engines/wrong.html"' in (site / "index.html").read_text(encoding="utf-8")
    assert "confirmed" in (site / "engines" / "wrong.html").read_text(encoding="utf-8")


def site(saved: Path, out: Path) -> None:
    """The ``site`` subcommand in this process (``build_site`` runs it as the lead does)."""
    assert main(["site", str(saved), "--out", str(out)]) == 0


def test_a_missing_saved_table_is_one_line_and_exit_4(tmp_path: Path) -> None:
    built = build_site(tmp_path / "ecosystem.json", tmp_path / "site")
    assert built.returncode == 4, (built.stdout, built.stderr)
    assert (
        built.stderr
        == f"specgate ecosystem: cannot read {tmp_path / 'ecosystem.json'}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "is not JSON"),
        ('{"rows": 3}', "not a saved ecosystem table (no list of rows)"),
        ('{"rows": [{"key": "a"}]}', "not a saved ecosystem table: KeyError"),
    ],
    ids=["not-json", "no-rows", "a-row-without-fields"],
)
def test_a_bad_saved_table_is_one_line(tmp_path: Path, content: str, said: str) -> None:
    saved = tmp_path / "ecosystem.json"
    saved.write_text(content, encoding="utf-8")
    with pytest.raises(ecosystem.EcosystemError) as raised:
        site(saved, tmp_path / "site")
    assert said in str(raised.value) and "\n" not in str(raised.value), raised.value
    assert not (tmp_path / "site" / "index.html").exists()


def test_a_missing_report_is_one_line(tmp_path: Path) -> None:
    saved = saved_copy(tmp_path)
    next((saved.parent / "ecosystem" / "hf_jinja").glob("parity-*.json")).unlink()
    with pytest.raises(ecosystem.EcosystemError) as raised:
        site(saved, tmp_path / "site")
    assert str(raised.value).startswith("hf_jinja: cannot read its report: cannot read "), raised.value
    assert "\n" not in str(raised.value)


def test_every_text_of_the_table_is_escaped(tmp_path: Path) -> None:
    saved = saved_copy(tmp_path)
    data = json.loads(saved.read_text(encoding="utf-8"))
    evil = '<img src=x onerror="alert(1)">'
    data["rows"][0]["name"] = data["rows"][0]["version"] = evil
    data["rows"][0]["message"] = evil
    saved.write_text(json.dumps(data), encoding="utf-8")
    site(saved, tmp_path / "site")
    for page in ("index.html", "engines/hf_jinja.html"):
        text = (tmp_path / "site" / page).read_text(encoding="utf-8")
        assert "<img" not in text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text, page


@pytest.mark.slow  # a real chromium: the live session installs it (noxfile.ensure_chromium)
def test_the_site_in_a_real_browser(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """From file://: the index's matrix as the browser shows it equals the JSON's and the
    Markdown's counts; every engine's link opens its page, which names the engine and shows
    all its cases in the case browser (a case opens); its link back opens the index."""
    binary = chromium(request.config)
    saved = saved_copy(tmp_path)
    built = build_site(saved, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    data = json.loads(saved.read_text(encoding="utf-8"))
    expected, cases = json_counts(saved), report_cases(saved)
    assert markdown_counts(saved) == expected
    index = (tmp_path / "site" / "index.html").as_uri()
    browser = Chromium(binary, tmp_path / "profile")
    try:
        browser.load(index)
        shown = browser.js(
            "[...document.querySelectorAll('#matrix tr')].slice(1).map(tr => [tr.dataset.engine, "
            "tr.cells[1].textContent, [...tr.cells].slice(2).map(td => Number(td.textContent))])"
        )
        heads = browser.js("[...document.querySelectorAll('#matrix th')].slice(2).map(th => th.textContent)")
        assert heads == list(HEADINGS)
        assert {(e, s): dict(zip(OUTCOMES, n, strict=True)) for e, s, n in shown} == expected
        assert len(shown) == len(expected)
        browser.js("window.scrollTo(0, 0)")
        assert browser.screenshot(tmp_path / "site-index.png").stat().st_size > 10_000
        links = browser.js(
            "Object.fromEntries([...document.querySelectorAll('#engines tr[data-engine]')]"
            ".map(tr => [tr.dataset.engine, tr.querySelector('a') && tr.querySelector('a').href]))"
        )
        assert set(links) == {row["key"] for row in data["rows"]}
        for row in data["rows"]:
            href = links[row["key"]]
            assert href and href.startswith("file://"), (row["key"], href)
            browser.load(href)
            assert browser.js("document.querySelector('h1') && document.querySelector('h1').textContent") == (
                f"{row['name']} — specgate ecosystem table"
            ), href
            n = cases[row["key"]]
            assert n > 0
            assert (
                browser.js("document.getElementById('case-shown').textContent") == f"{n} of {n} cases shown"
            )
            assert browser.js("document.querySelectorAll('#cases tr.case').length") == n
            outcomes = Counter(browser.js("[...document.querySelectorAll('#cases tr.case td:first-child')].map(td => td.textContent)"))  # fmt: skip
            total = Counter()
            for (key, _stage), counted in expected.items():
                if key == row["key"]:
                    total.update(counted)
            assert outcomes == +total, (row["key"], outcomes, total)
            browser.js("document.querySelector('#cases tr.case').click()")
            assert "the reference's answer:" in browser.js(
                "document.querySelector('#cases tr.detail').innerText"
            )
            browser.js("window.scrollTo(0, 0)")
            assert browser.screenshot(tmp_path / f"site-{row['key']}.png").stat().st_size > 10_000
            browser.js("document.getElementById('browser').scrollIntoView()")
            assert browser.screenshot(tmp_path / f"site-{row['key']}-cases.png").stat().st_size > 10_000
            back = browser.js("document.getElementById('to-index').href")
            assert back == index, back
        print(f"screenshots: {sorted(tmp_path.glob('site-*.png'))}")
    finally:
        browser.close()


def case_rows(page: str) -> list[list[str]]:
    """The case browser's rows, as its page carries them."""
    data = page.split('<script type="application/json" id="case-data">', 1)[1].split("</script>", 1)[0]
    return json.loads(data)


def test_an_engine_with_two_reports_has_them_in_one_browser_and_one_without_a_page_saying_so(
    tmp_path: Path,
) -> None:
    """A server engine is gated once per model: its page browses the cases of every report;
    an engine that gated nothing (unavailable) has a page that says so."""
    saved = saved_copy(tmp_path)
    data = json.loads(saved.read_text(encoding="utf-8"))
    jinja, tokenizers = data["rows"]
    (name,) = jinja["report_files"]
    second = name.replace("/parity-", "/other-model/parity-")
    (saved.parent.parent / second).parent.mkdir()
    shutil.copyfile(saved.parent.parent / name, saved.parent.parent / second)
    jinja["report_files"].append(second)
    tokenizers.update(status="unavailable", message="npm ci failed: no network", report_files=[])
    saved.write_text(json.dumps(data), encoding="utf-8")
    site(saved, tmp_path / "site")
    n = report_cases(saved)["hf_jinja"]
    page = (tmp_path / "site" / "engines" / "hf_jinja.html").read_text(encoding="utf-8")
    assert len(case_rows(page)) == n == 2 * len(json.loads((saved.parent.parent / name).read_text())["cases"])
    gone = (tmp_path / "site" / "engines" / "hf_tokenizers.html").read_text(encoding="utf-8")
    assert (
        "No report: the run unavailable without gating a case." in gone
        and "npm ci failed: no network" in gone
    )
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'href="engines/hf_tokenizers.html"' in index
    # its matrix row claims no count, as the Markdown's "—" row: the parser sees no cell
    cells = Matrix(index).cells
    assert cells[("hf_tokenizers", "—")] == {}
    assert [k for k in cells if k[0] == "hf_tokenizers"] == [("hf_tokenizers", "—")]

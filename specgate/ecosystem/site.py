"""The table as a static site (``reports/ecosystem-site/``, written with the table; rebuilt
from a saved one by ``python -m specgate.ecosystem site reports/ecosystem.json --out DIR``):
``index.html``, the table's page (``page.html``: the engines, the engines × stages matrix,
every published root cause with its confirmation mark) with each engine's name linking to
``engines/<key>.html``, that engine's page: its run, its published root causes and their
marks, then its gate run's parity report (``specgate.reports.html``: its matrix, every
root-cause group, the case browser of every case gated). Relative links, inline CSS and JS:
it opens from the file system, no server. An engine gated in several runs (a server engine,
one per model) has their reports merged into one page.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from specgate.ecosystem.confirm import FAILS
from specgate.ecosystem.gating import EngineRun
from specgate.ecosystem.markdown import CONFIRM_LINE_CHARS, MESSAGE_CHARS, TOP_CAUSES, unmachined
from specgate.ecosystem.page import CSS, NOT_PUBLISHED, engine_note, html
from specgate.ecosystem.results import Table
from specgate.reports import html as report_html
from specgate.safe_io import files
from specgate.safe_io.text_safety import html_text as escape

INDEX = "index.html"
ENGINES = "engines"


def site_dir(table: Table, out_dir: Path) -> Path:
    """``DIR/ecosystem-site`` for the full table, ``DIR/ecosystem-<a>+<b>-site`` for a subset."""
    return out_dir / f"{table.stem}-site"


def engine_href(row: EngineRun) -> str:
    """The engine's page, relative to the index."""
    return f"{ENGINES}/{files.safe_component(row.key)}.html"


def merged_report(row: EngineRun) -> dict[str, Any] | None:
    """The engine's gate-run reports as one payload (its only one as it is), or None: no report."""
    if len(row.reports) < 2:
        return row.reports[0] if row.reports else None
    cases: list[Any] = []
    details: list[Any] = []
    coverage: Counter[str] = Counter()
    reasons: list[str] = []
    for payload in row.reports:
        these = payload.get("cases") or []
        kept = list(payload.get("case_details") or [])[: len(these)]
        cases += these
        details += kept + [{}] * (len(these) - len(kept))  # the browser pairs them by position
        coverage.update(payload.get("coverage") or {})
        said = payload.get("verdict")
        reasons += said.get("reasons", []) if isinstance(said, dict) else list(said or [])
    return {
        "impl": row.name,
        "matrix": [m for payload in row.reports for m in payload.get("matrix", [])],
        "groups": row.groups(),
        "coverage": dict(coverage),
        "verdict": {"result": "fail" if reasons else "pass", "reasons": reasons},
        "provenance": row.reports[0].get("provenance"),
        "diagnosis_notes": [n for payload in row.reports for n in payload.get("diagnosis_notes") or []],
        "cases": cases,
        "case_details": details,
    }


def marks(row: EngineRun) -> str:
    """The published root causes, each linked to its group below, with its mark; then what the
    confirm script said."""
    items = []
    for number, g in enumerate(row.groups()[:TOP_CAUSES], 1):
        status, why = row.mark(g)
        items.append(
            f'<li><a href="#g-{escape(g["id"])}">{number}. {g["count"]}× {escape(g["outcome"])}: '
            f"{escape(g['stage'])}</a> — <b>{escape(status)}</b>"
            f"{escape(NOT_PUBLISHED if status == FAILS else '')}: {escape(why)}</li>"
        )
    parts = (
        [f'<h2>Published root causes and their confirmation</h2><ul id="marks">{"".join(items)}</ul>']
        if items
        else []
    )
    run = row.confirm
    if run is not None:
        held = sum(verdict == "REPRODUCES" for verdict, _ in run.lines)
        lines = "".join(
            f"<li>{escape(verdict)}: {escape(rest[:CONFIRM_LINE_CHARS])}{'…' if len(rest) > CONFIRM_LINE_CHARS else ''}</li>"
            for verdict, rest in run.lines
        )
        parts.append(
            f'<p class="note">Hand reproductions through the engine\'s own API (<code>{escape(run.command)}</code>, '
            f"{escape(run.status)}): {held} of {len(run.lines)} reproduce.</p><ul>{lines}</ul>"
        )
    return "\n".join(parts)


def engine_page(row: EngineRun) -> str:
    """The engine's page: its run and marks, then its parity report with the case browser."""
    header = (
        f'<nav><a id="to-index" href="../{INDEX}">← the ecosystem table</a></nav>\n{engine_note(row)}'
        + (f"<pre>{report_html.visible(row.message.strip()[:MESSAGE_CHARS])}</pre>" if row.message else "")
        + marks(row)
    )
    title = f"{row.name} — specgate ecosystem table"
    payload = merged_report(row)
    if payload is not None:
        return unmachined(report_html.page(payload, title=title, header=header, css=CSS))
    return unmachined(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{report_html._CSS}{CSS}</style></head>
<body>
<h1>{escape(title)}</h1>
{header}
<p id="no-report">No report: the run {escape(row.status)} without gating a case.</p>
</body></html>
""")


def write_site(table: Table, folder: Path) -> Path:
    """The site of ``table`` in ``folder``, its engine pages written anew; returns its index."""
    (folder / ENGINES).mkdir(parents=True, exist_ok=True)
    files.remove_stale(folder / ENGINES, "*.html")
    links = {row.key: engine_href(row) for row in table.rows}
    for row in table.rows:
        files.write_text(folder / links[row.key], engine_page(row))
    files.write_text(folder / INDEX, html(table, links))
    return folder / INDEX

"""The table as HTML in the parity report's style, with the same confirmation marks and
machine-free paths as the Markdown: ``html`` is the self-contained page
``reports/ecosystem.html`` and, given each engine's page (``links``), the index of the
table's site (``specgate.ecosystem.site``); ``engine_section`` is one engine's part of it,
shown again at the top of that engine's page."""

from __future__ import annotations

from specgate.ecosystem.confirm import FAILS
from specgate.ecosystem.gating import EngineRun
from specgate.ecosystem.markdown import MESSAGE_CHARS, TOP_CAUSES, gigabytes, machine_line, unmachined
from specgate.ecosystem.results import Table
from specgate.outcomes.gate import HEADINGS, OUTCOMES
from specgate.reports import html as report_html
from specgate.safe_io.text_safety import html_text as escape

#: What a group whose hand reproduction fails is called where it is shown.
NOT_PUBLISHED = " — hand reproduction fails: not published as the engine's defect"

CSS = "nav { margin-bottom: 1em; } td.engine a { font-weight: bold; }"


def engine_name(row: EngineRun, links: dict[str, str]) -> str:
    """The engine's name, a link to its page when it has one."""
    if row.key in links:
        return f'<a class="engine-page" href="{escape(links[row.key])}">{escape(row.name)}</a>'
    return escape(row.name)


def engine_note(row: EngineRun) -> str:
    return (
        f'<p class="note"><code>{escape(row.package)}</code> {escape(row.version)} ({escape(row.installer)}): '
        f"install {escape(row.install.status)}, run {escape(row.status)} in {row.seconds:g} s of a "
        f"{row.budget:g} s budget{f' ({escape(row.budget_note)})' if row.budget_note else ''}.</p>"
    )


def engine_section(row: EngineRun) -> str:
    """The engine's run, its message, its verdict and its published root causes with their marks."""
    parts = [engine_note(row)]
    if row.message:
        parts.append(f"<pre>{report_html.visible(row.message.strip()[:MESSAGE_CHARS])}</pre>")
    parts += [f'<p class="verdict">The run fails: {escape(v)}</p>' for v in row.verdict()]
    for i, g in enumerate(row.groups()[:TOP_CAUSES], 1):
        status, why = row.mark(g)
        flag = NOT_PUBLISHED if status == FAILS else ""
        parts += [
            f'<p class="note mark"><b>{escape(status)}</b>{escape(flag)}: {escape(why)}</p>',
            report_html._group(i, g),
        ]
    return "\n".join(parts)


def matrix(table: Table, links: dict[str, str]) -> str:
    """Engines × stages: per engine and stage, its count of each outcome (``data-*`` name them)."""
    head = "".join(f"<th>{h}</th>" for h in HEADINGS)
    body = []
    for r in table.rows:
        if not r.counts():  # gated nothing (could not run): no count is claimed, as in the Markdown
            body.append(
                f'<tr class="cell" data-engine="{escape(r.key)}" data-stage="—"><td class="engine">'
                f"{engine_name(r, links)}</td><td>—</td>{'<td>—</td>' * len(OUTCOMES)}</tr>"
            )
        for stage, c in r.counts().items():
            cells = "".join(
                f'<td class="count o-{o}{" zero" if not c.get(o, 0) else ""}" data-outcome="{o}">{c.get(o, 0)}</td>'
                for o in OUTCOMES
            )
            body.append(
                f'<tr class="cell" data-engine="{escape(r.key)}" data-stage="{escape(stage)}">'
                f'<td class="engine">{engine_name(r, links)}</td><td>{escape(stage)}</td>{cells}</tr>'
            )
    return f'<table id="matrix"><tr><th>engine</th><th>stage</th>{head}</tr>{"".join(body)}</table>'


def causes(table: Table, links: dict[str, str]) -> str:
    """Every published root cause (the top groups of each engine) and its mark."""
    rows = []
    for r in table.rows:
        for number, g in enumerate(r.groups()[:TOP_CAUSES], 1):
            rows.append(
                f'<tr data-engine="{escape(r.key)}"><td class="engine">{engine_name(r, links)}</td>'
                f'<td class="count">{number}</td><td>{escape(g["outcome"])}: {escape(g["stage"])}</td>'
                f'<td class="count">{g["count"]}</td><td class="mark">{escape(r.mark(g)[0])}</td></tr>'
            )
    if not rows:
        return ""
    return (
        '<h2>Root causes and their confirmation</h2><table id="causes"><tr><th>engine</th><th>group</th>'
        f"<th>outcome: stage</th><th>cases</th><th>confirmation</th></tr>{''.join(rows)}</table>"
    )


def html(table: Table, links: dict[str, str] | None = None) -> str:
    """The table as one page; ``links``: each engine's page by its key (the site's index)."""
    links = links or {}
    summary = "".join(
        f'<tr data-engine="{escape(r.key)}"><td class="engine">{engine_name(r, links)}</td>'
        f"<td><code>{escape(r.package)}</code></td><td>{escape(r.version)}</td>"
        f"<td>{escape(r.installer)}</td><td>{escape(r.install.status)}</td><td>{escape(r.status)}</td>"
        f'<td class="count">{r.seconds:g}</td><td class="count">{r.budget:g}</td>'
        f'<td class="count">{gigabytes(r.peak_bytes)}</td></tr>'
        for r in table.rows
    )
    sections = "".join(
        f'<section class="engine" id="engine-{escape(r.key)}"><h2>{engine_name(r, links)}</h2>\n'
        f"{engine_section(r)}</section>\n"
        for r in table.rows
    )
    problems = "".join(f"<li>{escape(p)}</li>" for p in table.problems)
    subset = f" (engines {', '.join(sorted(table.engines))} only)" if table.engines is not None else ""
    return unmachined(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specgate ecosystem table</title><style>{report_html._CSS}{CSS}</style></head>
<body>
<h1>specgate ecosystem table{escape(subset)}</h1>
<p class="note">Generated by <code>nox -s ecosystem</code> on {escape(table.started)}. {escape(machine_line(table))}</p>
<table id="engines"><tr><th>engine</th><th>package</th><th>version</th><th>installer</th><th>install</th>
<th>run</th><th>seconds</th><th>budget</th><th>peak GB</th></tr>{summary}</table>
<h2>Engines × stages</h2>
{matrix(table, links)}
{causes(table, links)}
{f"<h2>Problems</h2><ul>{problems}</ul>" if problems else ""}
{sections}
</body></html>
""")

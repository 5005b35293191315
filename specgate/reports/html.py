"""The parity report as one self-contained HTML page (inline CSS and JS, nothing
fetched): the stage × model × outcome matrix, the root-cause groups with their
reproducers, every case in a browser (``specgate.reports.browser``), and filters by
stage, model and outcome.

The page is built from the same payload as the JSON report, so the two always
agree (``tests/reports/test_report_html.py`` checks it in a real headless browser). The
filters can be preset from the address's fragment — ``page.html#outcome=fail&stage=encode``
— so a link can point at one slice of a run.
"""

from __future__ import annotations

from typing import Any

from specgate.outcomes.gate import HEADINGS, OUTCOMES
from specgate.reports import browser as report_browser
from specgate.safe_io.text_safety import controls, escaped, json_escaped
from specgate.safe_io.text_safety import html_text as escape

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 2px 8px; }
td.count { text-align: right; font-variant-numeric: tabular-nums; }
td.count.zero { color: #bbb; }
td.o-pass:not(.zero) { background: #d6f0d6; } td.o-fail:not(.zero) { background: #f6c9c9; }
td.o-refused:not(.zero) { background: #cddcf6; } td.o-error:not(.zero) { background: #e3cdf0; }
td.o-reference-disagreement:not(.zero) { background: #f6e4b8; }
.verdict { color: #a00; font-weight: bold; } .verdict.pass { color: #161; }
#filters { position: sticky; top: 0; background: #fff; padding: .4em 0; border-bottom: 1px solid #ddd; }
#filters label { margin-right: 1em; }
section.group { border: 1px solid #ddd; border-radius: 4px; padding: .5em 1em; margin: .8em 0; }
section.group h3 { font-size: 1em; margin: .2em 0; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; white-space: pre-wrap; }
pre .ws { color: #c60; }
.note { color: #666; font-size: .9em; }
[hidden] { display: none !important; }
"""

_JS = """
function stageMatches(stage, wanted) {  // "logits" selects logits/exact and logits/quantized too
  return !wanted || stage === wanted || stage.startsWith(wanted + '/');
}
function applyFilters() {
  const want = {};
  for (const name of ['stage', 'model', 'outcome']) want[name] = document.getElementById('f-' + name).value;
  let rows = 0, groups = 0;
  for (const row of document.querySelectorAll('tr.row')) {
    const count = want.outcome ? Number(row.querySelector('td[data-outcome="' + want.outcome + '"]').textContent) : 1;
    const show = stageMatches(row.dataset.stage, want.stage) &&
                 (!want.model || row.dataset.model === want.model) && count > 0;
    row.hidden = !show; if (show) rows++;
  }
  for (const group of document.querySelectorAll('section.group')) {
    const show = (group.dataset.stages || group.dataset.stage).split(' ').some(s => stageMatches(s, want.stage)) &&
                 (!want.model || group.dataset.models.split(' ').includes(want.model)) &&
                 (!want.outcome || group.dataset.outcome === want.outcome);
    group.hidden = !show; if (show) groups++;
  }
  document.getElementById('shown').textContent = rows + ' rows, ' + groups + ' groups shown';
  if (caseBrowser) caseBrowser.apply(want);
  const hash = Object.entries(want).filter(([, v]) => v).map(([k, v]) => k + '=' + encodeURIComponent(v)).join('&');
  history.replaceState(null, '', hash ? '#' + hash : location.pathname);
}
function decoded(text) {  // malformed percent-encoding (a hand-edited link) is ignored, not fatal
  try { return decodeURIComponent(text); } catch (e) { return null; }
}
function loadFilters() {
  for (const part of location.hash.slice(1).split('&')) {
    const cut = part.indexOf('=');
    if (cut < 0) continue;
    const name = decoded(part.slice(0, cut)), value = decoded(part.slice(cut + 1));
    const select = name === null ? null : document.getElementById('f-' + name);
    if (!select || value === null) continue;
    if ([...select.options].some(o => o.value === value)) select.value = value;
  }
}
document.addEventListener('DOMContentLoaded', () => {
  loadFilters();
  for (const select of document.querySelectorAll('#filters select')) select.addEventListener('change', applyFilters);
  applyFilters();
});
"""


def visible(text: str) -> str:
    """HTML of ``text`` with tabs and trailing spaces made visible (``→``, ``·``)."""
    out = []
    for line in controls(str(text)).split("\n"):
        body = line.rstrip(" \t")
        tail = line[len(body) :].replace(" ", "·").replace("\t", "→")
        body = escape(body).replace("\t", '<span class="ws">→</span>\t')
        out.append(body + (f'<span class="ws">{escape(tail)}</span>' if tail else ""))
    return "\n".join(out)


def _options(name: str, values: list[str]) -> str:
    opts = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
    return f'<label>{name} <select id="f-{name}"><option value="">all</option>{opts}</select></label>'


def _matrix(rows: list[dict[str, Any]]) -> str:
    head = "<tr><th>stage</th><th>model</th>" + "".join(f"<th>{h}</th>" for h in HEADINGS) + "</tr>"
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="count o-{o}{" zero" if not row[o] else ""}" data-outcome="{o}">{row[o]}</td>'
            for o in OUTCOMES
        )
        body.append(
            f'<tr class="row" data-stage="{escape(row["stage"])}" data-model="{escape(row["model"])}">'
            f"<td>{escape(row['stage'])}</td><td>{escape(row['model'])}</td>{cells}</tr>"
        )
    return f'<table id="matrix">{head}{"".join(body)}</table>'


def _texts(inp: dict[str, Any]) -> list[str]:
    """The reproducer's text (or template) once more with every space, tab and newline visible."""
    text = inp.get("text", inp.get("template"))
    if not isinstance(text, str):
        return []
    shown = escape(escaped(text)).replace(" ", "·").replace("\t", "→").replace("\n", "↵\n").replace("\r", "␍")
    return [
        f'<div class="note">with whitespace visible (· space, → tab, ↵ newline):</div><pre class="ws">{shown}</pre>'
    ]


def _group(number: int, group: dict[str, Any]) -> str:
    cases = "".join(f"<li><code>{escape(n)}</code></li>" for n in group["first_cases"])
    parts = [
        f'<section class="group" id="g-{escape(group["id"])}" data-stage="{escape(group["stage"])}" '
        f'data-stages="{escape(" ".join(group.get("stages") or [group["stage"]]))}" '
        f'data-outcome="{escape(group["outcome"])}" data-models="{escape(" ".join(group["models"]))}">',
        f'<h3>{number}. <span class="group-count">{group["count"]}</span>× {escape(group["outcome"])} — '
        f'<span class="heading">{escape(report_browser.group_heading(group))}</span></h3>',
        f'<details class="note"><summary>signature</summary><code>{escape(controls(group["signature"]))}</code></details>',
        *(
            [f'<div class="diagnosis"><b>Diagnosis:</b> {escape(group["evidence"])}.</div>']
            if group.get("diagnosis")
            else []
        ),
        *(
            [f'<div class="localized"><b>Localized:</b> {escape(group["localized"])}</div>']
            if group.get("localized")
            else []
        ),
        *(
            [
                '<div class="note">one cause, shown in:</div><ul class="shows-in">'
                + "".join(f"<li>{escape(line)}</li>" for line in shown)
                + "</ul>"
            ]
            if (shown := report_browser.shows_in(group))
            else []
        ),
        f'<div class="note">models: {escape(", ".join(group["models"]))}; first cases:</div><ul>{cases}</ul>',
        f"<pre>{visible(group['first_message'].strip()[:4000])}</pre>",
    ]
    repro = group.get("reproducer")
    if repro is None:
        if group.get("shrink_note"):
            parts.append(f'<div class="note">No reproducer: {escape(group["shrink_note"])}</div>')
    else:
        shrunk = repro["shrinking"]
        parts += [
            f"<h4>Minimized reproducer <code>{escape(group['reproducer_file'] or '')}</code></h4>",
            f'<div class="note">shrunk from {shrunk["from_size"]} to {shrunk["to_size"]} in {shrunk["seconds"]} s '
            f"({shrunk['checks']} checks). {escape(repro['note'])}</div>",
            f'<pre class="repro-input">{visible(json_escaped(repro["input"], indent=1)[:3000])}</pre>',
            *_texts(repro["input"]),
            f"<pre>{visible(repro['divergence'].strip()[:3000])}</pre>",
        ]
    parts.append("</section>")
    return "\n".join(parts)


def verdict_html(verdict: Any) -> str:
    """The headline: the verdict, then every reason (an older report's list: its rules)."""
    if not isinstance(verdict, dict):
        verdict = {"result": "fail" if verdict else "pass", "reasons": list(verdict or [])}
    if verdict["result"] == "pass":
        return '<p class="verdict pass" id="verdict">Verdict: PASS</p>'
    items = "".join(f"<li>{escape(r)}</li>" for r in verdict["reasons"])
    return f'<p class="verdict" id="verdict">Verdict: FAIL</p><ul class="verdict">{items}</ul>'


def provenance_html(prov: Any) -> str:
    """Who and what the run was (``specgate.run.provenance``), as a short list."""
    from specgate.run.provenance import lines

    if not isinstance(prov, dict):
        return ""
    items = "".join(f"<li>{escape(label)}{escape(text)}</li>" for label, text in lines(prov))
    return f'<ul id="provenance" class="note">{items}</ul>'


def _diagnosis_notes(notes: list[str]) -> str:
    """What the diagnosis left undone (groups the budget left undiagnosed), and why."""
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return f'<ul id="diagnosis-notes" class="note">{items}</ul>' if notes else ""


def page(payload: dict[str, Any], title: str = "", header: str = "", css: str = "") -> str:
    """The whole page for a report payload (the JSON report's dict); a page embedding the
    report (an ecosystem engine's) gives its own ``title``, ``header`` HTML (shown under
    the title) and ``css``."""
    rows = payload["matrix"]
    stages = sorted({r["stage"].split("/")[0] for r in rows} | {r["stage"] for r in rows})
    models = sorted({r["model"] for r in rows})
    groups = payload.get("groups", [])
    coverage = payload.get("coverage", {})
    verdict = verdict_html(payload.get("verdict"))
    title = title or f"specgate parity report — {payload['impl']}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{_CSS}{report_browser.CSS}{css}</style></head>
<body>
<h1>{escape(title)}</h1>
{header}{verdict}
<p id="coverage">{escape(", ".join(f"{n} {o}" for o, n in sorted(coverage.items())))}</p>
{provenance_html(payload.get("provenance"))}
<div id="filters">{_options("stage", stages)}{_options("model", models)}{_options("outcome", list(OUTCOMES))}
<span id="shown" class="note"></span></div>
<h2>Matrix</h2>
{_matrix(rows)}
<h2>Root causes ({len(groups)} groups, largest first)</h2>
{_diagnosis_notes(payload.get("diagnosis_notes") or [])}
{"".join(_group(i, g) for i, g in enumerate(groups, 1)) or "<p>No failures, errors or reference disagreements.</p>"}
{report_browser.section(payload)}
<script>{_JS}{report_browser.JS}</script>
</body></html>
"""

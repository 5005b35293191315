"""The case browser of the HTML report: every case of the run, with its input and the
answers shown with visible whitespace (``·`` space, ``→`` tab), its first divergence
(the message) in plain spaces (only whitespace ending a line made visible); filtered by
the page's stage/model/outcome selects, searched by text, sorted; refusals grouped by
their message. Each case has an anchor (``report.html#case-<node id>`` opens it).

Sizes stay proportional to the number of cases: every shown value is cut to
``SHOWN_CHARS`` characters with a visible marker (``impl.bounds.cut``). Invisible and
combining code points are written as escapes (``e\\u0301``, ``\\x85``) before anything
reaches the page. A failing, refused or errored case also shows the engine's own
answer, the reference's answer windowed around the first divergence and their diff,
as its record kept them (``specgate.run.case_answers``, bounded there).

The cases' details (``case_details``) come from the snapshots the cases were gated on,
through the loader triage reads a case's input with (``specgate.upkeep.recorded_cases``):
the snapshot root each record carries.
"""

from __future__ import annotations

import json
import re
from typing import Any

from impl.bounds import cut
from specgate.safe_io.text_safety import controls, escaped, json_escaped, one_line
from specgate.safe_io.text_safety import html_text as escape

#: The most characters of one shown value (input, reference answer, message).
SHOWN_CHARS = 2000
#: The stages whose cases carry an input and reference answer in a snapshot.
_SNAPSHOT_STAGES = ("split", "encode", "decode", "render")


def shows_in(group: dict[str, Any]) -> list[str]:
    """Where a group's one cause shows, a line per merged group (its stages, models, case
    count and divergence site); empty when it shows in one place only."""
    sites = group.get("shows_in") or []
    if len(sites) < 2:
        return []
    return [
        f"{', '.join(s['stages'])} · {', '.join(s['models'])} · {s['count']} {s['outcome']} "
        f"case{'s' if s['count'] != 1 else ''}"
        + (f" · first divergence {s['where']}" if s.get("where") else "")
        for s in sites
    ]


def group_heading(group: dict[str, Any], width: int = 160) -> str:
    """A group's heading: its named cause when diagnosed, else its first case's real
    first message line (without the gate's prefix naming the case; invisible code
    points escaped; shortened) — never the masked
    signature, which stays the grouping key. A group merged by a localized cause is headed
    by that cause."""
    if group.get("diagnosis"):
        return f"the engine {group['diagnosis']}"
    if group.get("cause"):  # the localized cause its groups shared (``triage.merge_by_cause``)
        return group["cause"]
    lines = [line for line in str(group.get("first_message", "")).splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    head, sep, rest = line.partition(": ")
    if sep and head.startswith("[") and "]" in head:  # the gate's "[stage] model M, case C: " prefix
        line = rest
    line = one_line(escaped(line, double_backslashes=False))
    line = line if len(line) <= width else line[: width - 1] + "…"
    return f"{line} — first divergence {group['where']}" if group.get("where") else line


def _shown(text: str) -> str:
    """``text`` cut to ``SHOWN_CHARS`` with a visible marker (cut before escaping too:
    escaping walks every character)."""
    return cut(text, SHOWN_CHARS)


def _input_and_reference(stage: str, model: str, case: dict[str, Any]) -> tuple[str, str]:
    if stage == "split":
        return escaped(case["text"]), json_escaped(case["pieces"])
    if stage == "encode":
        return (
            escaped(case["text"]) + f"\n(parse_special={case['parse_special']})",
            json.dumps(case["ids"]),
        )
    if stage == "decode":
        text = bytes.fromhex(case["hex"]).decode("utf-8", "backslashreplace")
        return json.dumps(case["ids"]), escaped(text) + f"\n(bytes: {case['hex']})"
    if "template" in case:  # a construct template and its context
        answer = case.get("output", case.get("error"))
        return (
            escaped(case["template"]) + "\ncontext: " + json_escaped(case["context"]),
            escaped(answer) if isinstance(answer, str) else json_escaped(answer),
        )
    inp = {k: case[k] for k in ("messages", "add_generation_prompt", "kwargs") if k in case}
    answer = case.get("prompt", case.get("error"))
    return json_escaped(inp, indent=1), escaped(answer) if isinstance(answer, str) else json_escaped(answer)


def case_details(records: list[Any]) -> list[dict[str, str]]:
    """Per record (same order): its input and the reference's answer as shown
    (escaped, each cut to ``SHOWN_CHARS``), empty strings where the stage has none. Each
    case is read from the snapshot it was gated on (``specgate.upkeep.recorded_cases``:
    the record's own snapshot root, a ``--snapshot-dir`` run's too)."""
    from specgate.upkeep import corpus
    from specgate.upkeep.recorded_cases import RecordedCases

    cases = RecordedCases()
    out = []
    for r in records:
        stage, case_id = r.stage.split("/")[0], getattr(r, "case", "")
        shown = {"input": "", "reference": ""}
        if stage in _SNAPSHOT_STAGES and case_id:
            constructs = r.model == corpus.CONSTRUCTS_MODEL_ID
            case = cases.case(r, "render_template" if constructs else stage)
            try:
                if case is not None:
                    inp, ref = _input_and_reference(stage, r.model, case)
                    shown = {"input": _shown(inp), "reference": _shown(ref)}
            except (KeyError, TypeError, ValueError):
                pass  # a snapshot of another shape: the case is shown without details
        out.append(shown)
    return out


def _rows(payload: dict[str, Any]) -> list[list[Any]]:
    """The compact rows the page's script reads: stage, model, outcome, nodeid,
    message, input, reference, the engine's answer, the diff, where it diverges (the
    kept answers are already escaped and bounded; cut again: a report is input)."""
    details = payload.get("case_details") or []
    rows = []
    for i, c in enumerate(payload.get("cases", [])):
        d = details[i] if i < len(details) else {}
        kept = c.get("answers") if isinstance(c.get("answers"), dict) else {}
        message = _shown(escaped(_shown(str(c.get("message", "")).strip()), double_backslashes=False))
        rows.append([*(controls(str(c.get(k, ""))) for k in ("stage", "model", "outcome", "nodeid")), message, d.get("input", ""),
                     *(_shown(str(kept.get(k) or d.get(k, ""))) for k in ("reference", "engine", "diff", "where")),
                     anchor(str(c.get("nodeid", "")))])  # fmt: skip
    return rows


def anchor(nodeid: str) -> str:
    """The case's anchor in the page (``report.html#<anchor>`` opens it): its node id, which
    names one case in a run, with whitespace, ``#`` and ``%`` written ``%<hex>.`` (an id has
    no whitespace; distinct node ids keep distinct anchors)."""
    return "case-" + re.sub(r"[\s#%]", lambda m: f"%{ord(m[0]):X}.", nodeid)


def _refusals(payload: dict[str, Any]) -> str:
    groups: dict[str, list[str]] = {}
    for c in payload.get("cases", []):
        if c["outcome"] == "refused":
            groups.setdefault(str(c.get("message", "")).strip(), []).append(c["nodeid"])
    if not groups:
        return ""
    items = []
    for message, nodeids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        cases = "".join(f"<li><code>{escape(escaped(n))}</code></li>" for n in nodeids[:200])
        more = f"<li>… and {len(nodeids) - 200} more</li>" if len(nodeids) > 200 else ""
        items.append(
            f'<details class="refusal"><summary><span class="refusal-count">{len(nodeids)}</span>× '
            f"{escape(_shown(escaped(_shown(message), double_backslashes=False)))}</summary><ul>{cases}{more}</ul></details>"
        )
    return f"<h3>Refusals, grouped by message ({len(groups)})</h3>{''.join(items)}"


CSS = """
#cases table { width: 100%; } #cases td { vertical-align: top; font-size: .9em; }
#cases tr.case { cursor: pointer; } #cases tr.case:hover { background: #f3f3ff; }
#cases td.msg { font-family: monospace; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 40em; }
#cases .o-fail { color: #a00; } #cases .o-pass { color: #161; } #cases .o-refused { color: #135; }
#cases .o-error { color: #609; } #cases a.here { color: #999; text-decoration: none; }
#cases tr.case:target { outline: 2px solid #88f; } #cases tr.detail pre { max-height: 30em; overflow: auto; }
#case-tools input { width: 20em; } #case-tools label { margin-right: 1em; }
"""

JS = """
const caseBrowser = (() => {
  const data = document.getElementById('case-data');
  if (!data) return null;  // a page without the case table (its filters still work)
  const rows = JSON.parse(data.textContent);
  const body = document.querySelector('#cases tbody');
  const esc = s => String(s).replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'})[c]);
  const firstLine = m => m.split('\\n')[0].replace(/^\\[[^\\]]*\\][^:]*: /, '').slice(0, 300);  // without the case prefix
  body.innerHTML = rows.map((r, i) =>  // one string: thousands of rows in one parse
    `<tr class="case" id="${esc(r[10])}" data-i="${i}"><td class="o-${esc(r[2])}">${esc(r[2])}</td><td>${esc(r[0])}</td>` +
    `<td>${esc(r[1])}</td><td><span class="nodeid">${esc(r[3])}</span> <a class="here" href="#${esc(encodeURIComponent(r[10]))}" ` +
    `title="a link to this case">#</a></td><td class="msg">${esc(firstLine(r[4]))}</td></tr>`
  ).join('');
  const trs = [...body.rows];
  body.addEventListener('click', e => {
    const tr = e.target.closest('tr.case');
    if (tr && !e.target.closest('a.here')) toggle(tr, rows[tr.dataset.i]);
  });
  function openLinked() {  // report.html#case-<node id>: that case shown, opened and scrolled to
    const tr = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!tr || !tr.classList.contains('case')) return;
    tr.hidden = false;
    const next = tr.nextElementSibling;
    if (!(next && next.classList.contains('detail'))) toggle(tr, rows[tr.dataset.i]);
    tr.scrollIntoView();
  }
  window.addEventListener('hashchange', openLinked);
  window.addEventListener('load', openLinked);
  const haystack = rows.map(r => [r[3], r[4], r[5], r[6], r[7], r[9]].join('\\n').toLowerCase());
  function ws(text) {  // whitespace made visible: · space, → tab, ↵ newline
    return text.replace(/ /g, '\\u00b7').replace(/\\t/g, '\\u2192').replace(/\\n/g, '\\u21b5\\n');
  }
  function trailing(text) {  // a message: plain spaces, only whitespace ending a line made visible
    return text.replace(/[ \\t]+$/gm, m => m.replace(/ /g, '\\u00b7').replace(/\\t/g, '\\u2192'));
  }
  function block(title, text, show) {  // show: how whitespace is shown (default: all of it visible)
    const div = document.createElement('div');
    const h = document.createElement('div'); h.className = 'note'; h.textContent = title;
    const pre = document.createElement('pre'); pre.className = 'ws'; pre.textContent = text ? (show || ws)(text) : '(not recorded)';
    div.append(h, pre); return div;
  }
  function toggle(tr, r) {
    const next = tr.nextElementSibling;
    if (next && next.classList.contains('detail')) { next.remove(); return; }
    const d = document.createElement('tr'); d.className = 'detail';
    const td = document.createElement('td'); td.colSpan = 5;
    td.append(block('input (invisible and combining code points escaped; · space, → tab, ↵ newline):', r[5]),
              block("the reference's answer:", r[6]),
              block("the engine's answer:", r[7]),
              block('the first divergence' + (r[9] ? ' (' + r[9] + ')' : '') + ':', r[4], trailing),
              block('diff (- reference, + engine; · space, → tab, ↵ newline):', r[8], t => t));
    d.appendChild(td); tr.after(d);
  }
  let want = {};
  function apply(filters) {
    if (filters) want = filters;
    const q = document.getElementById('c-search').value.toLowerCase();
    let shown = 0;
    for (const tr of trs) {
      const r = rows[tr.dataset.i];
      const show = stageMatches(r[0], want.stage) && (!want.model || r[1] === want.model) &&
                   (!want.outcome || r[2] === want.outcome) && (!q || haystack[tr.dataset.i].includes(q));
      tr.hidden = !show; if (show) shown++;
      const next = tr.nextElementSibling;
      if (!show && next && next.classList.contains('detail')) next.remove();
    }
    document.getElementById('case-shown').textContent = shown + ' of ' + rows.length + ' cases shown';
  }
  function sort() {
    const key = Number(document.getElementById('c-sort').value);
    const order = trs.slice().sort((a, b) => {
      const x = rows[a.dataset.i][key], y = rows[b.dataset.i][key];
      return x < y ? -1 : x > y ? 1 : a.dataset.i - b.dataset.i;
    });
    for (const d of body.querySelectorAll('tr.detail')) d.remove();
    for (const tr of order) body.appendChild(tr);
  }
  document.getElementById('c-search').addEventListener('input', () => apply());
  document.getElementById('c-sort').addEventListener('change', sort);
  return { apply, sort, total: rows.length };
})();
"""


def section(payload: dict[str, Any]) -> str:
    """The case browser's HTML: the cases' data (JSON in a script element that cannot
    close it), the table the script fills, the search and sort tools, the refusals."""
    data = json_escaped(_rows(payload)).replace("<", "\\u003c")
    sorts = "".join(
        f'<option value="{i}">{name}</option>'
        for i, name in ((3, "case id"), (0, "stage"), (1, "model"), (2, "outcome"), (4, "message"))
    )
    n = len(payload.get("cases", []))
    return f"""<h2 id="browser">All cases ({n})</h2>
<div id="case-tools"><label>search <input id="c-search" type="search" placeholder="text in id, message, input, answer"></label>
<label>sort by <select id="c-sort">{sorts}</select></label>
<span id="case-shown" class="note"></span>
<span class="note">(stage, model and outcome follow the filters above; click a case for its input, answer and divergence)</span></div>
{_refusals(payload)}
<table id="cases"><thead><tr><th>outcome</th><th>stage</th><th>model</th><th>case</th><th>first divergence</th></tr></thead><tbody></tbody></table>
<script type="application/json" id="case-data">{data}</script>"""

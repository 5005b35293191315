"""The compliance report: the stage × model matrix and the findings grouped by root
cause (``specgate.run.triage``), as text, Markdown, JSON, a PNG and one self-contained
HTML page (``specgate.reports.html``)."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impl.bounds import cut
from specgate.outcomes.gate import HEADINGS, OUTCOMES
from specgate.reports import browser as report_browser
from specgate.reports import html as report_html
from specgate.run import provenance, triage
from specgate.safe_io import files
from specgate.safe_io.text_safety import (
    json_escaped,
    md_fence,
    md_inline,
    md_text,
    one_line,
    png_text,
    terminal,
)


def report_stem(impl: str, shard: tuple[int, int] | None = None) -> str:
    """The one file stem of every report of a run of ``--impl impl``: readable (the
    impl string with other characters folded to ``_``) and collision-free (a short
    hash of the whole string, so ``cmd:a.py`` and ``cmd:a_py`` — or two servers on
    other ports — never share files; a shard's reports end in ``-shard-I-of-N``).
    No dots: nothing can cut it at a suffix."""
    readable = re.sub(r"[^A-Za-z0-9-]+", "_", impl).strip("_")[:60] or "impl"
    stem = f"parity-{readable}-{hashlib.sha256(impl.encode('utf-8')).hexdigest()[:8]}"
    return stem + (f"-shard-{shard[0]}-of-{shard[1]}" if shard else "")


def coverage(records: list[Any]) -> Counter:
    return Counter(r.outcome for r in records)


def headline(records: list[Any]) -> str:
    """The run's coverage in one line: how many cases were gated and what became of them."""
    counts = coverage(records)
    gated = sum(counts[o] for o in ("pass", "fail", "refused", "error"))
    return (
        f"coverage: {gated} cases gated — {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['refused']} refused, {counts['error']} errors; {counts['n/a']} n/a, "
        f"{counts['reference-disagreement']} reference disagreements"
    )


def models_gated(records: list[Any]) -> list[str]:
    """The models the run gated, in the order their first case ran."""
    return list(dict.fromkeys(r.model for r in records))


def refusal_groups(records: list[Any]) -> list[tuple[str, list[Any]]]:
    """Refusals grouped by their message, largest group first."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for r in records:
        if r.outcome == "refused":
            groups[r.message.strip()].append(r)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def tally(records: list[Any]) -> dict[tuple[str, str], Counter]:
    table: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in records:
        table[(r.stage, r.model)][r.outcome] += 1
    return dict(sorted(table.items()))


def metrics_summary(records: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Worst value per metric per (stage, model): max for errors/divergences, min for agreement."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for r in records:
        for name, value in r.metrics.items():
            if not isinstance(value, (int, float)):
                continue
            cur = out[(r.stage, r.model)].get(name)
            worse = min if ("agree" in name or "top1" in name) else max
            out[(r.stage, r.model)][name] = value if cur is None else worse(cur, value)
    return dict(out)


def matrix_text(records: list[Any]) -> str:
    table = tally(records)
    mets = metrics_summary(records)
    width = max([18, *(len(stage) for stage, _ in table)])  # state_conversation/quantized is 28
    head = f"{'stage':<{width}} {'model':<36} " + " ".join(f"{o:>8}" for o in HEADINGS)
    lines = [head, "-" * len(head)]
    for (stage, model), counts in table.items():
        row = f"{stage:<{width}} {model:<36} " + " ".join(f"{counts.get(o, 0):>8}" for o in OUTCOMES)
        if (stage, model) in mets:
            row += "  " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(mets[(stage, model)].items()))
        lines.append(row)
    return terminal("\n".join(lines))


def write_reports(results: Any, report_dir: str | Path) -> list[Path]:
    out = Path(report_dir)
    if (why := files.writable_dir(out)) is not None:
        raise files.WriteError(f"cannot write the reports into {out}: {why}")
    stem = out / report_stem(
        getattr(results, "report_name", "") or results.impl, getattr(results, "shard", None)
    )
    table = tally(results.records)
    mets = metrics_summary(results.records)
    causes = getattr(results, "groups", None) or triage.group_records(results.records)
    verdict = run_verdict_object(results)
    payload = {
        "impl": results.impl,
        "shard": getattr(results, "shard", None),
        "provenance": getattr(results, "provenance", None),
        "startup_failure": getattr(results, "startup_failure", "") or None,  # the engine did not start: why
        "coverage": dict(coverage(results.records)),
        "models": models_gated(results.records),
        "verdict": verdict,
        "matrix": [
            {"stage": s, "model": m, **{o: c.get(o, 0) for o in OUTCOMES}, "metrics": mets.get((s, m), {})}
            for (s, m), c in table.items()
        ],
        "groups": [g.as_dict() for g in causes],
        # what the diagnosis left undone (groups the budget left undiagnosed), and why
        "diagnosis_notes": list(getattr(results, "diagnosis_notes", None) or []),
        "cases": [r.__dict__ for r in results.records],
        # per case (same order): its input and the reference's answer as the case browser shows them
        "case_details": report_browser.case_details(results.records),
    }
    json_path = stem.with_name(stem.name + ".json")
    files.write_text(json_path, json.dumps(payload, indent=1, ensure_ascii=False, default=str))

    md = [
        f"# specgate parity report — {md_inline(results.impl)}",
        "",
        *verdict_markdown(verdict),
        headline(results.records),
        "",
        f"Models gated ({len(payload['models'])}): {md_text(', '.join(payload['models']))}",
        "",
        *provenance_markdown(payload["provenance"] or {}),
        "",
        "| stage | model | " + " | ".join(OUTCOMES) + " | metrics |",
        "|---|---|" + "---:|" * len(OUTCOMES) + "---|",
    ]
    for (s, m), c in table.items():
        metric = ", ".join(f"{k}={v:.4g}" for k, v in sorted(mets.get((s, m), {}).items()))
        md.append(
            f"| {md_text(s)} | {md_text(m)} | "
            + " | ".join(str(c.get(o, 0)) for o in OUTCOMES)
            + f" | {metric} |"
        )
    groups = refusal_groups(results.records)
    if groups:
        md += ["", "## Refusals, grouped by message", ""]
        for message, group in groups:
            md += [f"- **{len(group)}×** {md_text(message[:500])}"]
            md += [f"  - {md_inline(r.nodeid)}" for r in group[:3]]
    if causes:
        md += ["", "## Root causes", "", f"{len(causes)} groups of findings, largest first.", ""]
        if payload["diagnosis_notes"]:  # what the diagnosis left undone, and why
            md += [*(f"- **{md_text(n)}**" for n in payload["diagnosis_notes"]), ""]
        for number, group in enumerate(payload["groups"], 1):
            md += group_markdown(number, group)
    png_path = (
        write_heatmap(table, stem.with_name(stem.name + ".png"), results.impl, list(verdict["reasons"]))
        if table
        else None
    )
    if png_path is not None:
        md[2:2] = [f"![parity matrix]({png_path.name})", ""]
    md_path = stem.with_name(stem.name + ".md")
    files.write_text(md_path, "\n".join(md) + "\n")
    html_path = stem.with_name(stem.name + ".html")
    files.write_text(html_path, report_html.page(payload))
    return [md_path, json_path, html_path, *([png_path] if png_path is not None else [])]


def provenance_markdown(prov: dict[str, Any]) -> list[str]:
    """The provenance as a few Markdown lines, every value escaped (``md_text``: a
    handshake's name is the engine's own words) and the command inline code it cannot
    close (``md_inline``)."""
    return [
        f"- {label}{md_inline(text) if label == 'command: ' else md_text(text)}"
        for label, text in provenance.lines(prov)
    ]


def run_verdict_object(results: Any) -> dict[str, Any]:
    """The run's ``verdict`` object (``specgate.outcomes.verdict.verdict_object``): the engine not
    starting and crash loops cut short come first among its reasons."""
    from specgate.outcomes.verdict import verdict_object
    from specgate.run.crashloop import notes

    before = [results.startup_failure] if getattr(results, "startup_failure", "") else []
    return verdict_object(
        results.records, list(getattr(results, "verdict", [])), [*before, *notes(results.records)]
    )


def verdict_markdown(verdict: dict[str, Any]) -> list[str]:
    """The Markdown headline: the verdict, then every reason."""
    if verdict["result"] == "pass":
        return ["**Verdict: PASS**", ""]
    n = len(verdict["reasons"])
    return [
        f"**Verdict: FAIL** — {n} reason{'s' if n != 1 else ''}:",
        "",
        *[f"- {md_text(r)}" for r in verdict["reasons"]],
        "",
    ]


def group_markdown(number: int, group: dict[str, Any]) -> list[str]:
    """One root-cause group: its size and signature, its first three cases, its first
    full message and its reproducer (or why there is none)."""
    cases = f"{group['count']} case{'s' if group['count'] > 1 else ''}"
    cause = group.get("diagnosis")
    lines = [
        f"### {md_text(group['outcome'])}: {md_text(', '.join(group.get('stages') or [group['stage']]))} · {cases} (group {number}) — {md_text(report_browser.group_heading(group))}",
        "",
        *(
            [f"**Diagnosis:** {md_text(group['evidence'])}.  "]
            if cause
            else [f"signature: {md_inline(group['signature'])}  "]
        ),
        *([f"**Localized:** {md_text(group['localized'])}  "] if group.get("localized") else []),
        *(
            ["**One cause, shown in:**", *[f"- {md_text(line)}" for line in shown], ""]
            if (shown := report_browser.shows_in(group))
            else []
        ),
        f"models: {md_text(', '.join(group['models']))}; first cases:",
        *[f"- {md_inline(nodeid)}" for nodeid in group["first_cases"]],
        "",
        *md_fence(group["first_message"].strip()[:4000]),
        "",
    ]
    repro = group["reproducer"]
    if repro is None:
        return [*lines, f"No reproducer: {md_text(group['shrink_note'])}" if group["shrink_note"] else "", ""]
    shrunk = repro["shrinking"]
    return [
        *lines,
        f"**Minimized reproducer** {md_inline(str(group['reproducer_file']))} (shrunk from "
        f"{shrunk['from_size']} to {shrunk['to_size']} in {shrunk['seconds']} s; {md_text(repro['note'])})",
        "",
        *md_fence(json_escaped(repro["input"])[:2000], "json"),
        "",
        *md_fence(repro["divergence"].strip()[:2000]),
        "",
    ]


class MergeError(ValueError):
    """Shard reports that do not make one run (reported as one line)."""


@dataclass
class MergedRun:
    impl: str
    records: list[Any]
    verdict: list[str]
    shard: None = None  # the merged report is the whole run's
    provenance: dict[str, Any] | None = None  # the shards' (``merged_provenance``)


class ReportFileError(MergeError):
    """A file that is not a specgate JSON report a merge can take (a usage error: exit 4)."""


#: The longest stage, node id or impl string taken from a report file.
MAX_NAME_CHARS = 2000
_CASE_TEXT = ("stage", "model", "outcome", "nodeid")


def _read_report(path: Path, budget: int) -> tuple[dict[str, Any], int]:
    """A shard's JSON report and what parsing it cost (``files.parsed_cost``), read when
    it is a regular file within ``MAX_REPORT_BYTES`` whose cost is within ``budget`` (the
    shards of one merge share ``files.MAX_PARSED_BYTES``), and checked field by field
    (``check_report``): a malformed one is one ``ReportFileError`` line."""
    from specgate.reports.diff import MAX_REPORT_BYTES

    cost = 0
    try:
        data = files.read_regular(path, MAX_REPORT_BYTES, "report")
        cost = files.parsed_cost(data)
        payload = files.parse_json(data, path, "report", budget)
    except files.UnsafeFile as exc:
        shared = " (the reports of one merge share this bound)" if cost > budget else ""
        raise ReportFileError(f"{exc}{shared}") from None
    problem = check_report(payload)
    if problem:
        raise ReportFileError(f"{path}: not a specgate JSON report: {problem}"[:1000])
    return payload, cost


def check_report(payload: Any) -> str | None:
    """None when ``payload`` is a report a merge can take: an object with a string
    ``impl``, a ``shard`` that is null or ``[I, N]`` with 1 <= I <= N, a ``provenance``
    that is null or an object, and ``cases`` each an object of ``GateRecord``'s fields
    only, with their types, a known outcome and a model id that is one safe path
    component (``files.component_problem``). Else what is wrong, in a few words."""
    from specgate.outcomes.verdict import GateRecord

    if not isinstance(payload, dict):
        return f"a JSON {type(payload).__name__}, not an object"
    if not isinstance(payload.get("impl"), str) or len(payload["impl"]) > MAX_NAME_CHARS:
        return f"its impl is not a string (of at most {MAX_NAME_CHARS} characters)"
    shard = payload.get("shard")
    if shard is not None and not (
        isinstance(shard, list)
        and len(shard) == 2
        and all(type(n) is int for n in shard)
        and 1 <= shard[0] <= shard[1] <= 100_000
    ):
        return f"its shard is {_short(shard)}, not null or [I, N] with 1 <= I <= N"
    if payload.get("provenance") is not None and not isinstance(payload["provenance"], dict):
        return "its provenance is not an object"
    cases = payload.get("cases")
    if not isinstance(cases, list):
        return "no list of cases"
    fields = set(GateRecord.__dataclass_fields__)
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            return f"case {i} is {_short(case)}, not an object"
        if extra := sorted(set(case) - fields):
            return f"case {i} has unknown fields: {', '.join(map(repr, extra))[:200]}"
        for key in _CASE_TEXT:
            if not isinstance(case.get(key), str) or len(case[key]) > MAX_NAME_CHARS:
                return f"case {i}'s {key} is {_short(case.get(key))}, not a string"
        if case["outcome"] not in OUTCOMES:
            return f"case {i}'s outcome {_short(case['outcome'])} is none of {', '.join(OUTCOMES)}"
        if (why := files.component_problem(case["model"])) is not None:
            return f"case {i}'s model {_short(case['model'])} is no model id: {why}"
        for key in ("message", "case"):
            if not isinstance(case.get(key, ""), str):
                return f"case {i}'s {key} is {_short(case[key])}, not a string"
        metrics = case.get("metrics", {})
        if not isinstance(metrics, dict) or not all(
            isinstance(v, (int, float, str, bool)) or v is None for v in metrics.values()
        ):
            return f"case {i}'s metrics are {_short(metrics)}, not an object of numbers"
        answers = case.get("answers", {})
        if not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
            return f"case {i}'s answers are {_short(answers)}, not an object of strings"
    return None


def _short(value: Any) -> str:
    """A value named in an error line: its JSON, cut, controls escaped."""
    shown = (
        json.dumps(value, ensure_ascii=False, default=str)
        if not isinstance(value, (dict, list))
        else type(value).__name__
    )
    return terminal(shown[:80] + ("…" if len(shown) > 80 else ""))


def check_shards(paths: list[Path], payloads: list[dict[str, Any]]) -> None:
    """The reports are one run's shards: one impl, and shards 1..N each exactly once
    (or no shard at all: runs over different models joined into one report)."""
    impls = {p["impl"] for p in payloads}
    if len(impls) > 1:
        raise MergeError(f"reports of different engines cannot be merged: {', '.join(sorted(impls))}")
    shards = [tuple(p["shard"]) if p.get("shard") else None for p in payloads]
    if all(s is None for s in shards):
        return
    if any(s is None for s in shards):
        unsharded = [str(path) for path, s in zip(paths, shards, strict=True) if s is None]
        raise MergeError(f"sharded and unsharded reports mixed: {', '.join(unsharded)} carry no shard")
    totals = {n for _, n in shards}
    if len(totals) > 1:
        raise MergeError(f"reports from different shard counts: N = {', '.join(map(str, sorted(totals)))}")
    (total,) = totals
    seen = Counter(i for i, _ in shards)
    twice = sorted(i for i, n in seen.items() if n > 1)
    missing = sorted(set(range(1, total + 1)) - set(seen))
    if twice or missing:
        raise MergeError(
            f"shards of {total}: "
            + "; ".join([f"missing {missing}"] * bool(missing) + [f"given twice {twice}"] * bool(twice))
        )


def merge(paths: list[Path]) -> MergedRun:
    """One run from its shards' JSON reports: their cases joined, the run verdict recomputed
    (a stage answered only by refusals fails whichever shards its cases ran in)."""
    from specgate.outcomes.verdict import GateRecord, run_verdict

    if not paths:
        raise MergeError("no report to merge")
    payloads, budget = [], files.MAX_PARSED_BYTES
    for path in paths:
        payload, cost = _read_report(path, budget)
        payloads.append(payload)
        budget -= cost
    check_shards(paths, payloads)
    records, where = [], {}
    for path, payload in zip(paths, payloads, strict=True):
        for case in payload["cases"]:
            if case["nodeid"] in where:
                raise MergeError(
                    f"case {_short(case['nodeid'])} is in both {where[case['nodeid']]} and {path}"
                )
            where[case["nodeid"]] = path
            records.append(GateRecord(**case))
    return MergedRun(
        payloads[0]["impl"], records, run_verdict(records), None, merged_provenance(paths, payloads)
    )


def merged_provenance(paths: list[Path], payloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first shard's provenance for the whole run, its models the union of the
    shards', and each merged report's file, shard, command and date."""
    provs = [p.get("provenance") or {} for p in payloads]
    if not any(provs):
        return None
    models = [
        m
        for prov in provs
        if isinstance(prov.get("models"), list)
        for m in prov["models"]
        if isinstance(m, str)
    ]
    merged = [
        {
            "file": path.name,
            "shard": prov.get("shard"),
            "command": prov.get("command"),
            "date": prov.get("date"),
        }
        for path, prov in zip(paths, provs, strict=True)
    ]
    first = next(prov for prov in provs if prov)
    return {**first, "models": list(dict.fromkeys(models)), "shard": None, "merged_from": merged}


# Outcome colours: the hue says which outcome, the saturation what share of the row's cases.
_COLOURS = {
    "pass": (0.13, 0.55, 0.13),
    "fail": (0.80, 0.10, 0.10),
    "n/a": (0.45, 0.45, 0.45),
    "refused": (0.10, 0.35, 0.80),
    "reference-disagreement": (0.85, 0.60, 0.00),
    "error": (0.50, 0.10, 0.60),
}


def verdict_line(table: dict[tuple[str, str], Counter], problems: list[str]) -> str:
    """The run's verdict in one line (as the exit status has it: any failing case, error or
    run-level problem fails the run)."""
    failed = sum(c.get("fail", 0) for c in table.values())
    errors = sum(c.get("error", 0) for c in table.values())
    if failed or errors or problems:
        extra = f"; {len(problems)} run problem{'s' if len(problems) != 1 else ''}" if problems else ""
        return f"FAIL — {failed} failed, {errors} errors{extra}"
    return "PASS"


#: The PNG's geometry, in pixels: a row's height, an outcome column's width, the margin.
_ROW, _COLUMN, _MARGIN = 22, 96, 12
#: What the PNG draws at most, whatever a run or a merged report holds: rows (the main job
#: has 183; the rest are counted in a last line — the Markdown and JSON list every one), and
#: characters of a row's label and of the engine's name in the title. Unbounded, a merged
#: report of 100,000 stage × model pairs would have asked for a picture of 6 GB.
PNG_ROWS, PNG_LABEL_CHARS, PNG_TITLE_CHARS = 1000, 120, 240


def write_heatmap(
    table: dict[tuple[str, str], Counter], path: Path, impl: str, problems: list[str] = ()
) -> Path | None:
    """The matrix as a PNG (rows stage × model, columns outcomes, cells the counts, each
    cell's colour the outcome's hue at its share of the row), for a CI summary page, titled
    with the run's verdict and date (also in the PNG's text chunks ``Title``, ``Verdict``
    and ``Date``, so a picture is never read without them). Drawn with Pillow (the
    ``report`` extra): a table of text and rectangles needs no plotting library — matplotlib
    took ~0.45 s to import and ~1.7 s to draw the main job's 183 rows. Without Pillow the
    picture is skipped with a notice and the text reports are unaffected."""
    try:
        from PIL import Image, ImageDraw, ImageFont, PngImagePlugin
    except ImportError:
        print("specgate: Pillow not installed (pip install 'specgate[report]'); skipping the PNG matrix")
        return None
    import datetime as _dt
    import io

    try:
        font = ImageFont.load_default(size=12)  # Pillow's own scalable font (FreeType)
    except (TypeError, ImportError, OSError):  # a Pillow without FreeType: its bitmap font
        font = ImageFont.load_default()
    verdict = verdict_line(table, list(problems))
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = (
        f"specgate parity — {cut(one_line(impl), 4 * PNG_TITLE_CHARS)}"  # the Title chunk: controls escaped
    )
    drawn = verdict.replace(" — ", " - ")  # the font draws ASCII (png_text) and the middle dot
    lines = [
        *textwrap.wrap(png_text(f"specgate parity - {cut(impl, PNG_TITLE_CHARS)}"), 60),
        f"verdict: {png_text(drawn)} · {date}",
    ]
    rows = list(table)[:PNG_ROWS]
    left = len(table) - len(rows)
    labels = [
        f"{png_text(cut(stage, PNG_LABEL_CHARS // 3))} · {png_text(cut(model, PNG_LABEL_CHARS))}"
        for stage, model in rows
    ]
    label_width = int(max((font.getlength(t) for t in labels), default=0)) + 2 * _MARGIN
    top = _MARGIN + _ROW * (len(lines) + 1)  # the title's lines, then the column headings
    width = max(label_width + _COLUMN * len(OUTCOMES), int(max(font.getlength(t) for t in lines))) + _MARGIN
    height = top + _ROW * (max(len(rows), 1) + bool(left)) + _MARGIN
    picture = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(picture)
    ink = (170, 0, 0) if verdict != "PASS" else (17, 102, 17)
    for i, line in enumerate(lines):
        draw.text((width / 2, _MARGIN + _ROW * i + _ROW / 2), line, fill=ink, font=font, anchor="mm")
    for j, heading in enumerate(HEADINGS):
        x = label_width + _COLUMN * j + _COLUMN / 2
        draw.text((x, top - _ROW / 2), heading, fill="black", font=font, anchor="mm")
    if left:
        more = f"... and {left:,} more rows (the Markdown and JSON reports list every one)"
        draw.text((_MARGIN, top + _ROW * len(rows) + _ROW / 2), more, fill="black", font=font, anchor="lm")
    for i, ((stage, model), label) in enumerate(zip(rows, labels, strict=True)):
        y = top + _ROW * i
        draw.text((label_width - _MARGIN, y + _ROW / 2), label, fill="black", font=font, anchor="rm")
        counts = table[(stage, model)]
        total = max(sum(counts.get(o, 0) for o in OUTCOMES), 1)
        for j, outcome in enumerate(OUTCOMES):
            count = counts.get(outcome, 0)
            share = count / total
            alpha = 0.25 + 0.75 * share if count else 0.0
            fill = tuple(round(255 * ((1 - alpha) + alpha * c)) for c in _COLOURS[outcome])
            x = label_width + _COLUMN * j
            draw.rectangle((x, y, x + _COLUMN - 1, y + _ROW - 1), fill=fill, outline=(220, 220, 220))
            if count:
                shade = "white" if share > 0.5 else "black"
                draw.text((x + _COLUMN / 2, y + _ROW / 2), str(count), fill=shade, font=font, anchor="mm")
    chunks = PngImagePlugin.PngInfo()
    for key, value in (("Title", title), ("Verdict", verdict), ("Date", date)):
        chunks.add_text(key, value)
    out = io.BytesIO()  # drawn in memory, then written as every report file is (files.write_bytes)
    picture.save(out, format="PNG", pnginfo=chunks, optimize=False)
    files.write_bytes(path, out.getvalue())
    return path

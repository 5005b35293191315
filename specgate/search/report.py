"""The search report: ``<out>/search-<impl stem>.md`` and ``.json``, and one
reproducer per root cause in ``<out>/repro/search-<impl stem>/<group>.json`` —
the format of the parity run's reproducers, so ``specgate repro FILE --impl X``
replays them.

Only ``engine-divergence`` findings are engine failures. Oracle bugs are listed
first and loudly, with their input; reference disagreements and unconfirmed
candidates (no reference could run) are listed apart from the failures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specgate.run.reproducer import bounded_answer
from specgate.safe_io import files
from specgate.safe_io.text_safety import md_fence, md_inline
from specgate.search import reference_confirm as confirming
from specgate.search.search_session import Finding, SearchResult
from specgate.search.searchable import size

SECTIONS = (
    (confirming.ORACLE_BUG, "ORACLE BUGS — the references agree with the engine, not with the oracle"),
    (confirming.ENGINE_DIVERGENCE, "Engine divergences (confirmed by the references)"),
    (confirming.REFERENCE_DISAGREEMENT, "Reference disagreements (not engine failures)"),
    (confirming.UNCONFIRMED, "Unconfirmed candidates (no reference could judge them; not engine failures)"),
)


def stem(impl: str) -> str:
    from specgate.reports.parity_report import report_stem

    return "search-" + report_stem(impl).removeprefix("parity-")


def write(result: SearchResult, out: Path) -> list[Path]:
    """Reproducers, Markdown and JSON reports; returns the report paths."""
    from specgate.run.triage import REFERENCE_NOTE, Group

    name = stem(result.impl)
    repro_dir = out / "repro" / name
    files.remove_stale(repro_dir)  # this search's reproducers only (the database replays old failures first)
    for finding in result.findings:
        c = finding.candidate
        key = c.signature + (f" ¦ {c.shape}" if c.shape else "")  # variants of one signature: own files
        group = Group(key, [_Record(c.stage if c.stage != "template" else "render", c.model)])
        finding.group_id = group.id
        repro_dir.mkdir(parents=True, exist_ok=True)
        path = repro_dir / f"{group.id}.json"
        files.write_text(path, json.dumps(_reproducer(result, finding, REFERENCE_NOTE), indent=1, ensure_ascii=False, default=str) + "\n")  # fmt: skip
        finding.reproducer_path = str(path)
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / f"{name}.md", out / f"{name}.json"
    files.write_text(md, markdown(result))
    files.write_text(js, json.dumps(payload(result), indent=1, ensure_ascii=False, default=str) + "\n")
    return [md, js]


class _Record:
    """What ``triage.Group`` needs of a record to name a group."""

    def __init__(self, stage: str, model: str) -> None:
        self.stage, self.model = stage, model


def _reproducer(result: SearchResult, f: Finding, note: str) -> dict[str, Any]:
    c = f.candidate
    return {
        "impl": result.impl,
        "group": f.group_id,
        "signature": c.signature,
        "stage": _file_stage(c.stage, f.confirmation),
        "model": c.model,
        "original_case": f"differential search, --seed {result.seed}, example {c.found_after}",
        "reference": "oracle",
        "note": note.replace("the original case was confirmed", "this input was judged"),
        "confirmation": f.confirmation.as_dict(),
        "input": f.input,
        "outcome": c.outcome,
        "divergence": bounded_answer(f.answers.get("message", c.message)),
        "engine_answer": bounded_answer(f.answers.get("engine")),
        "oracle_answer": bounded_answer(f.answers.get("oracle")),
        "original_input": c.first_input,
        "shrinking": {
            "from_size": size(c.first_input),
            "to_size": size(f.input),
            "checks": f.checks,
            "seconds": f.minimize_seconds,
        },
    }


def _file_stage(stage: str, confirmation: confirming.Confirmation) -> str:
    """The stage a reproducer file is replayed as: construct templates are render inputs;
    a generate input is judged in the class its references judged it in."""
    if stage == "template":
        return "render"
    if stage == "generate":
        return "generate/quantized" if "llamacpp" in confirmation.judges else "generate/exact"
    return stage


def payload(result: SearchResult) -> dict[str, Any]:
    return {
        "impl": result.impl,
        "seed": result.seed,
        "budget_seconds": result.budget,
        "seconds": result.seconds,
        "stages": [
            {
                "stage": r.stage,
                "model": r.model,
                "examples": r.examples,
                "rounds": r.rounds,
                "seconds": r.seconds,
                "notes": r.notes,
                "oracle_errors": r.oracle_errors,
                "explained": sum(r.explained.values()),
            }
            for r in result.runs
        ],
        "skipped": result.skipped,
        "given": result.given,
        "given_causes": result.given_causes,
        "explained": result.explained,  # divergences the given causes explained, by cause: not findings
        "references_missing": result.references_missing,
        "findings": [
            {
                "verdict": f.confirmation.verdict,
                "judges": f.confirmation.judges,
                "stage": f.candidate.stage,
                "model": f.candidate.model,
                "signature": f.candidate.signature,
                "shape": f.candidate.shape,
                "outcome": f.candidate.outcome,
                "input": f.input,
                "size": size(f.input),
                "divergence": bounded_answer(f.answers.get("message", f.candidate.message)),
                "hits": f.candidate.hits,
                "reproducer_file": f.reproducer_path,
            }
            for f in result.findings
        ],
    }


def explained_line(result: SearchResult) -> str:
    """What the given localized causes explained: a count, never a clean bill."""
    n = sum(result.explained.values())
    return (
        f"{n} divergence{'s' if n != 1 else ''} explained by the given cause(s) — counted, not kept: "
        "the split/encode divergences listed are those no given cause explains (localized against the "
        "oracle's tokenizer; the engine still has the given causes' bugs)"
    )


def markdown(result: SearchResult) -> str:
    lines = [
        f"# Differential search: `{result.impl}`",
        "",
        f"seed {result.seed}, budget {result.budget:g} s, took {result.seconds:g} s. "
        "Inputs ran through the engine and the oracle side by side; every divergence was minimized and "
        "judged by the stage's live references before being reported.",
        "",
        "| stage | model | examples | divergences from the oracle | notes |",
        "|---|---|---|---|---|",
    ]
    for r in result.runs:
        explained = sum(r.explained.values())
        notes = "; ".join(
            r.notes
            + [f"{len(r.oracle_errors)} oracle error(s)"] * bool(r.oracle_errors)
            + [f"{explained} explained by the given cause(s)"] * bool(explained)
        )
        lines.append(f"| {r.stage} | {r.model} | {r.examples} | {len(r.candidates)} | {notes} |")
    if result.given:
        lines.append(
            f"\ngiven: {md_inline(', '.join(result.given))} — the split/encode/decode reference was the oracle "
            "with these known deviations, so the divergences listed are those they do not explain "
            "(the references judged each against the spec'd oracle)"
        )
    if result.given_causes:
        lines.append("\n" + explained_line(result))
        lines += [f"- {md_inline(c)}: {result.explained.get(c, 0)}" for c in result.given_causes]
    for why in result.skipped:
        lines.append(f"\nskipped: {why}")
    if result.references_missing:
        lines += ["", "**References missing here** — candidates they would judge are listed as unconfirmed:"]
        lines += [f"- {why}" for why in result.references_missing]
    for verdict, title in SECTIONS:
        found = result.by_verdict(verdict)
        lines += ["", f"## {title}: {len(found)}", ""]
        for f in found:
            lines += [
                f"### {f.candidate.stage} · {f.candidate.model} · {md_inline(f.group_id)}",
                f"- signature: {md_inline(f.candidate.signature)}",
                f"- input shape: {md_inline(str(f.candidate.shape))}",
                f"- input ({size(f.input)} units): {md_inline(json.dumps(f.input, ensure_ascii=False)[:600])}",
                f"- judges: {'; '.join(f'{k}: {v}' for k, v in f.confirmation.judges.items())}",
                f"- reproducer: `{f.reproducer_path}`",
                "",
                *md_fence((f.answers.get("message") or f.candidate.message)[:1500]),
                "",
            ]
    for r in result.runs:
        for e in r.oracle_errors:
            lines.append(
                f"- ORACLE ERROR on {r.stage}/{r.model}: {md_inline(str(e['error']))} — input "
                f"{md_inline(json.dumps(e['input'], ensure_ascii=False)[:300])}"
            )
    return "\n".join(lines) + "\n"

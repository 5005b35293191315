"""``specgate report diff OLD.json NEW.json``: what a change to an engine fixed and broke.

Two parity runs' JSON reports are compared case by case (a case is its pytest node id:
stage, model and case, stable from run to run):

* **newly failing** — a case that fails or errors in NEW and did not in OLD (also a case
  NEW gates that OLD did not);
* **newly passing** — a case that passes in NEW and did not in OLD;
* **other outcome changes** — e.g. refused → n/a, pass → reference-disagreement;
* **changed messages** — a case that fails, errors or is refused in both runs, with
  another message (another first divergence, another reason);
* **changed root causes** — the groups' headings (and diagnoses, where the report has
  them) that appear or disappear;
* cases gated only in one run.

The summary is short Markdown for a pull-request comment. The exit status is 1 when
something newly fails or errors, 0 otherwise, and 4 when a file is not a report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.safe_io.text_safety import md_inline, md_text

BAD = ("fail", "error")
SHOWN = 10  # cases listed per section of the summary; the counts are always whole
#: The largest JSON report read (by ``diff`` and ``merge``); it is parsed only when
#: ``files.parsed_cost`` is within ``files.MAX_PARSED_BYTES`` (1 GiB) too.
MAX_REPORT_BYTES = 512 * 1024 * 1024


class DiffError(ValueError):
    """A file that is not a specgate JSON report."""


@dataclass
class Change:
    nodeid: str
    stage: str
    model: str
    old: str  # outcome in OLD ("" when absent)
    new: str  # outcome in NEW ("" when absent)
    message: str = ""  # NEW's message (OLD's when the case is gone)
    old_message: str = ""


@dataclass
class ReportDiff:
    old_impl: str
    new_impl: str
    newly_failing: list[Change] = field(default_factory=list)
    newly_passing: list[Change] = field(default_factory=list)
    other_changes: list[Change] = field(default_factory=list)
    changed_messages: list[Change] = field(default_factory=list)
    only_old: list[Change] = field(default_factory=list)
    causes_gone: list[str] = field(default_factory=list)
    causes_new: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def regressed(self) -> bool:
        return bool(self.newly_failing)


def read_report(path: Path) -> dict[str, Any]:
    """A parity JSON report, or ``DiffError`` naming what is wrong with the file."""
    from specgate.safe_io import files

    try:  # a regular file within MAX_REPORT_BYTES, parsed only when its cost is bounded
        payload = files.read_json(path, MAX_REPORT_BYTES, "report")
    except files.UnsafeFile as exc:
        raise DiffError(str(exc)[:500]) from None
    cases = payload.get("cases") if isinstance(payload, dict) else None
    if not isinstance(cases, list) or not all(
        isinstance(c, dict) and isinstance(c.get("nodeid"), str) and isinstance(c.get("outcome"), str)
        for c in cases
    ):
        raise DiffError(f"{path}: not a specgate JSON report (no list of cases with nodeid and outcome)")
    return payload


def _causes(payload: dict[str, Any]) -> set[str]:
    out = set()
    for group in payload.get("groups") or []:
        if isinstance(group, dict):
            name = group.get("diagnosis") or group.get("signature")
            if isinstance(name, str):
                out.add(f"{group.get('stage', '')}: {name}")
    return out


def diff(old: dict[str, Any], new: dict[str, Any]) -> ReportDiff:
    before = {c["nodeid"]: c for c in old["cases"]}
    after = {c["nodeid"]: c for c in new["cases"]}
    result = ReportDiff(str(old.get("impl", "?")), str(new.get("impl", "?")))
    for nodeid, case in after.items():
        was = before.get(nodeid)
        change = Change(
            nodeid,
            str(case.get("stage", "")),
            str(case.get("model", "")),
            was["outcome"] if was else "",
            case["outcome"],
            str(case.get("message", "")),
            str(was.get("message", "")) if was else "",
        )
        if case["outcome"] in BAD and (was is None or was["outcome"] not in BAD):
            result.newly_failing.append(change)
        elif was is None:
            result.other_changes.append(change)
        elif case["outcome"] == "pass" and was["outcome"] != "pass":
            result.newly_passing.append(change)
        elif case["outcome"] != was["outcome"]:
            result.other_changes.append(change)
        elif (
            case["outcome"] != "pass"
            and str(case.get("message", "")).strip() != str(was.get("message", "")).strip()
        ):
            result.changed_messages.append(change)
        else:
            result.unchanged += 1
    for nodeid, case in before.items():
        if nodeid not in after:
            result.only_old.append(
                Change(nodeid, str(case.get("stage", "")), str(case.get("model", "")), case["outcome"], "",
                       str(case.get("message", "")))
            )  # fmt: skip
    old_causes, new_causes = _causes(old), _causes(new)
    result.causes_gone = sorted(old_causes - new_causes)
    result.causes_new = sorted(new_causes - old_causes)
    return result


def _first_line(message: str, width: int = 160) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return md_inline(line[:width] + ("…" if len(line) > width else ""))


def _section(
    title: str, changes: list[Change], show_message: bool, show_old_message: bool = False
) -> list[str]:
    if not changes:
        return []
    lines = ["", f"### {title} ({len(changes)})", ""]
    for c in changes[:SHOWN]:
        arrow = f"{md_text(c.old or 'absent')} → {md_text(c.new or 'absent')}"
        lines.append(f"- {md_inline(c.nodeid)} ({arrow})")
        if show_old_message and c.old_message:
            lines.append(f"  - was: {_first_line(c.old_message)}")
        if show_message and c.message:
            lines.append(f"  - {'now' if show_old_message else 'message'}: {_first_line(c.message)}")
    if len(changes) > SHOWN:
        lines.append(f"- … and {len(changes) - SHOWN} more")
    return lines


def markdown(result: ReportDiff) -> str:
    """The short summary for a pull-request comment."""
    impls = (
        md_inline(result.new_impl)
        if result.old_impl == result.new_impl
        else f"{md_inline(result.old_impl)} → {md_inline(result.new_impl)}"
    )
    verdict = "**newly failing cases**" if result.regressed else "nothing newly fails"
    lines = [
        f"## specgate report diff — {impls}",
        "",
        f"{verdict}: fixed {len(result.newly_passing)}, broke {len(result.newly_failing)}, "
        f"{len(result.changed_messages)} messages changed, {len(result.other_changes)} other outcome changes, "
        f"{result.unchanged} unchanged; {len(result.only_old)} cases gated only before.",
    ]
    lines += _section("Newly failing", result.newly_failing, show_message=True)
    lines += _section("Newly passing", result.newly_passing, show_message=False)
    lines += _section("Changed messages", result.changed_messages, show_message=True, show_old_message=True)
    lines += _section("Other outcome changes", result.other_changes, show_message=True)
    lines += _section("Gated only before", result.only_old, show_message=False)
    if result.causes_gone or result.causes_new:
        lines += ["", "### Root causes", ""]
        lines += [f"- gone: {md_inline(c)}" for c in result.causes_gone[:SHOWN]]
        lines += [f"- new: {md_inline(c)}" for c in result.causes_new[:SHOWN]]
    return "\n".join(lines) + "\n"

"""What a snapshot regeneration changed: ``reports/snapshot-diff.md``.

``nox -s snapshots`` copies ``snapshots/`` aside, lets the references overwrite it,
runs the gates on the oracle against the new files, then calls this module. The
report says, per model and stage, which cases were added, removed and changed
(each change with the first divergence between the old and the new value), which
provenance changed (model sha256, a reference's version, the lock), and whether the
oracle still agrees with the new snapshots.

``first_divergence_of_values`` is also how the reference re-checks describe a drift
(``specgate.upkeep.snapshots.exact``, ``specgate.upkeep.drift``).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Provenance keys that change on every run and say nothing about the references.
VOLATILE_PROVENANCE = ("date", "command")
MAX_CHANGES_LISTED = 40


# ---------------------------------------------------------------------------
# first divergence of two JSON values


def _excerpt(text: str, at: int, width: int = 30) -> str:
    return repr(text[max(0, at - width) : at + width])


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def first_divergence_of_values(old: Any, new: Any, path: str = "") -> str | None:
    """None when equal; else the first place two JSON values differ, as
    ``at <path>: <old> -> <new>`` (strings: the first differing character with text
    around it; lists: the first differing index and both lengths)."""
    where = path or "(whole value)"
    if type(old) is not type(new) and not (isinstance(old, (int, float)) and isinstance(new, (int, float))):
        return f"at {where}: {_short(old)} -> {_short(new)}"
    if isinstance(old, dict):
        # Removed keys first, then added ones, each in the file's order (deterministic).
        for key in old:
            if key not in new:
                return f"at {path}[{key!r}]: key removed (was {_short(old[key])})"
        for key in new:
            if key not in old:
                return f"at {path}[{key!r}]: key added ({_short(new[key])})"
        for key in sorted(old, key=str):
            found = first_divergence_of_values(old[key], new[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(old, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            found = first_divergence_of_values(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(old) != len(new):
            i = min(len(old), len(new))
            extra = old[i] if len(old) > len(new) else new[i]
            side = "old" if len(old) > len(new) else "new"
            return f"at {path}[{i}]: lengths {len(old)} -> {len(new)}; first extra ({side}) {_short(extra)}"
        return None
    if isinstance(old, str):
        if old == new:
            return None
        i = next(
            (k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
        )
        return f"at {where}, character {i}: {_excerpt(old, i)} -> {_excerpt(new, i)}"
    return None if old == new else f"at {where}: {_short(old)} -> {_short(new)}"


# ---------------------------------------------------------------------------
# one stage file


@dataclass
class StageDiff:
    model: str
    stage: str
    status: str = "changed"  # "new file" | "removed file" | "changed" | "provenance only" | "unchanged"
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def cases_changed(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def provenance_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Changed provenance entries, flattened one level (``packages.transformers``,
    ``lock.sha256``) and without the per-run ``date`` / ``command``."""

    def flat(prov: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in prov.items():
            if key in VOLATILE_PROVENANCE:
                continue
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                out[key] = value
        return out

    a, b = flat(old), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def diff_stage(model: str, stage: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> StageDiff:
    """Compare one ``{"provenance", "cases"}`` snapshot before and after regeneration."""
    if old is None and new is None:
        raise ValueError(f"{model}/{stage}: nothing to compare")
    if old is None:
        return StageDiff(model, stage, "new file", added=sorted(new["cases"]))
    if new is None:
        return StageDiff(model, stage, "removed file", removed=sorted(old["cases"]))
    before, after = old["cases"], new["cases"]
    diff = StageDiff(
        model,
        stage,
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        changed={
            case: why
            for case in sorted(before.keys() & after.keys())
            if (why := first_divergence_of_values(before[case], after[case]))
        },
        provenance=provenance_changes(old.get("provenance", {}), new.get("provenance", {})),
    )
    if not diff.cases_changed:
        diff.status = "provenance only" if diff.provenance else "unchanged"
    return diff


# ---------------------------------------------------------------------------
# two snapshot directories


class SnapshotDiffError(Exception):
    """A snapshot file that cannot be read as ``{"provenance", "cases"}`` JSON."""


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["cases"], data.setdefault("provenance", {})
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotDiffError(f"malformed snapshot {path}: {exc}") from exc
    return data


def diff_dirs(before: Path, after: Path) -> list[StageDiff]:
    """Every ``<model>/<stage>.json`` present on either side, compared."""
    names = sorted(
        {
            p.relative_to(root).as_posix()
            for root in (before, after)
            if root.exists()
            for p in root.glob("*/*.json")
        }
    )
    diffs = []
    for name in names:
        model, stage = name.removesuffix(".json").split("/", 1)
        diffs.append(diff_stage(model, stage, _read(before / name), _read(after / name)))
    return diffs


# ---------------------------------------------------------------------------
# the oracle re-check after regeneration (the gates' JUnit XML)


@dataclass
class GateCheck:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: int = 0
    ran: bool = True


def gate_check(junit: Path | None) -> GateCheck | None:
    """What the gates said about the oracle against the new snapshots."""
    if junit is None:
        return None
    if not junit.exists():
        return GateCheck(ran=False)
    result = GateCheck()
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            result.failed.append(name)
        elif case.find("skipped") is not None:
            result.skipped += 1
        else:
            result.passed += 1
    return result


# ---------------------------------------------------------------------------
# the report


def _provenance_lines(diff: StageDiff) -> list[str]:
    if not diff.provenance:
        return ["- provenance: unchanged (apart from date and command)"]
    lines = ["- provenance changed:"]
    for key, (old, new) in diff.provenance.items():
        lines.append(f"  - `{key}`: `{_short(old, 80)}` -> `{_short(new, 80)}`")
    return lines


def _stage_section(diff: StageDiff) -> list[str]:
    lines = [f"### {diff.model} / {diff.stage} — {diff.status}", ""]
    if diff.status in ("new file", "removed file"):
        ids = diff.added or diff.removed
        return [*lines, f"- {len(ids)} cases ({diff.status})", ""]
    lines.append(f"- added: {len(diff.added)}" + (f" — {', '.join(diff.added[:20])}" if diff.added else ""))
    lines.append(
        f"- removed: {len(diff.removed)}" + (f" — {', '.join(diff.removed[:20])}" if diff.removed else "")
    )
    lines.append(f"- changed: {len(diff.changed)}")
    for case, why in list(diff.changed.items())[:MAX_CHANGES_LISTED]:
        lines.append(f"  - `{case}`: {why}")
    if len(diff.changed) > MAX_CHANGES_LISTED:
        lines.append(f"  - … and {len(diff.changed) - MAX_CHANGES_LISTED} more")
    return [*lines, *_provenance_lines(diff), ""]


def _gate_lines(check: GateCheck | None) -> list[str]:
    if check is None:
        return ["The oracle was not re-checked against the new snapshots (no gate results given).", ""]
    if not check.ran:
        return ["**The oracle re-check did not run** (no gate results were written).", ""]
    if not check.failed:
        verdict = f"**The oracle still agrees** with the new snapshots: {check.passed} gate cases pass"
        return [f"{verdict}, {check.skipped} n/a or reference disagreements.", ""]
    lines = [
        f"**The oracle no longer agrees** with the new snapshots: {len(check.failed)} gate cases fail "
        f"({check.passed} pass, {check.skipped} n/a or reference disagreements). First failures:",
        "",
    ]
    lines += [f"- `{name}`" for name in check.failed[:MAX_CHANGES_LISTED]]
    if len(check.failed) > MAX_CHANGES_LISTED:
        lines.append(f"- … and {len(check.failed) - MAX_CHANGES_LISTED} more")
    return [*lines, ""]


def render(diffs: list[StageDiff], check: GateCheck | None) -> str:
    touched = [d for d in diffs if d.status != "unchanged"]
    case_changes = [d for d in touched if d.cases_changed]
    lines = [
        "# Snapshot regeneration: what changed",
        "",
        f"{len(diffs)} snapshot files compared; {len(case_changes)} with case changes, "
        f"{len(touched) - len(case_changes)} with provenance changes only, "
        f"{len(diffs) - len(touched)} unchanged.",
        "",
        "## Oracle re-check",
        "",
        *_gate_lines(check),
        "## Per model and stage",
        "",
    ]
    if not touched:
        lines += ["Nothing changed.", ""]
    for diff in touched:
        lines += _stage_section(diff)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specgate.upkeep.snapshot_diff", description=__doc__)
    parser.add_argument("before", type=Path, help="the snapshot directory as it was before regeneration")
    parser.add_argument("after", type=Path, help="the regenerated snapshot directory")
    parser.add_argument("--out", type=Path, default=Path("reports/snapshot-diff.md"))
    parser.add_argument(
        "--gates-junit", type=Path, help="JUnit XML of the gates run on the oracle afterwards"
    )
    args = parser.parse_args(argv)
    try:
        report = render(diff_dirs(args.before, args.after), gate_check(args.gates_junit))
    except (SnapshotDiffError, ET.ParseError) as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(f"snapshot diff: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

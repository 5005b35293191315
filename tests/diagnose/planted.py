"""A planted engine gated with the diagnosis on, and the catalogue names its report gives."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from tests.engines.parity_run import ParityRun, run_parity, script_impl


def diagnosed(
    tmp_path: Path,
    engine: Path,
    defects: str,
    stages: str,
    model: str,
    causes: Mapping[str, str],
    *extra: str,
    env: dict[str, str] | None = None,
) -> tuple[ParityRun, set[str]]:
    """Gate ``engine --defects=<defects>`` (a real ``cmd:`` process) on ``stages`` of ``model``
    without shrinking (``extra``: more pytest arguments); the run and the names of ``causes``
    its groups' diagnoses carry."""
    run = run_parity(
        tmp_path, script_impl(engine, f"--defects={defects}"), stages, model,
        "--shrink-budget", "0", "--diagnose-budget", "600", *extra, env=env,
    )  # fmt: skip
    assert run.status == 1, run.output[-3000:]
    diagnoses = {g["diagnosis"] for g in run.report["groups"] if g.get("diagnosis")}
    return run, {name for name, cause in causes.items() if any(cause in d for d in diagnoses)}


def explained(evidence: str) -> int:
    """How many cases a diagnosed group's evidence accounts for: one ``k of n failing …`` per
    row the deviated reference explains (a cause seen on several rows is one group, its rows'
    evidence joined), and ``k more failing …`` per undiagnosed group of the same localized
    cause that joined it (``triage.merge_by_cause``)."""
    return sum(int(k) for k in re.findall(r"(?:^|; )(\d+) (?:of \d+|more) failing ", evidence))


def assert_diagnosed(
    run: ParityRun, found: set[str], named: set[str], not_named: set[str], label: str
) -> list[dict]:
    """The run's diagnoses name every cause of ``named`` and none of the look-alikes
    ``not_named`` (``label``: the planted defects, for the message); its report's groups."""
    groups = run.report["groups"]
    assert found >= named, f"{label}: diagnosed {sorted(found)}; groups: {[g['signature'] for g in groups]}"
    assert not found & not_named, f"{label}: a look-alike was diagnosed: {sorted(found & not_named)}"
    return groups


def assert_evidence_explains(groups: list[dict], reference_says: str) -> None:
    """Each diagnosed group's evidence counts its cases (``k of n failing …``) that the
    deviated reference explains, says what it is (``reference_says``), and its count
    is the cases it explains."""
    for g in groups:
        if g.get("diagnosis"):
            assert g["evidence"].split(" of ")[0].isdigit() and reference_says in g["evidence"], g["evidence"]
            assert g["count"] == explained(g["evidence"])


def evidence_parts(evidence: str) -> list[str]:
    """A merged group's evidence, one part per place it shows: each starts ``N of M failing``."""
    return re.split(r"; (?=\d+ of \d+ failing )", evidence)

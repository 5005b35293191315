"""Hand confirmation of the published root causes: each engine folder's confirm script
(``[confirm] command``) reproduces divergences through the engine's own public API, outside
specgate, against reference values written in as literals, printing one line per divergence,
``REPRODUCES: <what>: ...`` or ``GONE: <what>: ...``. Each ``[[confirm.groups]]`` entry
names one root cause precisely — its stage and its diagnosis (a hypothesis name of the
stage's catalogue) and/or case ids the group must hold — and the divergences (the start of
``<what>``) that reproduce it (``covers``). A part of a message signature is no name for a
cause: signatures mask the reference and many causes share one.

Each group of the table is then marked (``mark``):

* **confirmed** — an entry names the group's cause and every divergence it names printed
  REPRODUCES; an entry that would cover groups of two different causes confirms neither;
* **confirm fails** — one of them printed GONE, is missing, or the script did not run to
  its end: called out in the table, not published as the engine's defect (it may be
  specgate's own adapter);
* **not confirmed** — no hand reproduction covers the group yet;
* **references disagree** — a group of reference disagreements: no claim about the engine.

``{gguf}`` / ``{model}`` in the command are the engine's first model's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from impl.process import lifeline
from specgate.ecosystem.install import tail
from specgate.ecosystem.spec import ConfirmedGroup, EngineSpec, child_path, diagnosis_cause
from specgate.supply.models import PROJECT_ROOT

CONFIRMED, FAILS, UNCONFIRMED = "confirmed", "confirm fails", "not confirmed"
LINE = re.compile(r"^(REPRODUCES|REPRODUCED|GONE):?\s+(.*)$", re.M)
#: A group of reference disagreements is not the engine's finding: nothing to confirm.
DISAGREE = "references disagree"
#: The least time a confirm script gets (it may load a model), whatever is left of the budget.
CONFIRM_FLOOR_SECONDS = 120.0


@dataclass
class ConfirmRun:
    """What the confirm script said: ``status`` "ran" (exit 0 or 1: it reported), "error"
    (another exit, or it could not start), "timeout"; ``lines`` each printed verdict line."""

    command: str
    status: str
    exit_code: int | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (REPRODUCES | GONE, the rest)
    output: str = ""


def run_confirm(spec: EngineSpec, timeout: float, env: dict[str, str]) -> ConfirmRun | None:
    """Run ``spec``'s confirm script from the project root (None when it has none)."""
    if spec.confirm is None:
        return None
    from specgate.supply import models as model_cache

    first = spec.models[0]
    try:
        gguf = str(model_cache.model_ref(first).gguf)
    except Exception as exc:  # an unknown or uncached model: the confirm cannot run
        return ConfirmRun(spec.confirm, "error", None, [], f"no GGUF for {first}: {exc}")
    command = spec.fill(spec.confirm, gguf=gguf, model=first)
    try:
        proc = lifeline.run(
            shlex.split(command),
            cwd=PROJECT_ROOT,
            env={**os.environ, **env, "PATH": child_path(env.get("PATH"))},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        said = (
            (exc.stdout or b"").decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else exc.stdout or ""
        )
        return ConfirmRun(command, "timeout", None, parse(said), f"did not finish within {timeout:g} s")
    except OSError as exc:
        return ConfirmRun(command, "error", None, [], f"cannot start it: {exc}")
    output = proc.stdout + proc.stderr
    status = "ran" if proc.returncode in (0, 1) else "error"
    return ConfirmRun(command, status, proc.returncode, parse(proc.stdout), tail(output, 600))


def parse(stdout: str) -> list[tuple[str, str]]:
    return [(m.group(1).replace("REPRODUCED", "REPRODUCES"), m.group(2)) for m in LINE.finditer(stdout)]


def case_ids(group: dict) -> list[str]:
    """The ``model/case`` ids the group is known to hold: those of its first cases, the ones
    the report lists (a case further down is not known to be in it: an entry naming it
    confirms nothing, never a group it is not in)."""
    nodeids = group.get("first_cases") or []
    return [n[n.index("[") + 1 : n.rindex("]")] if "[" in n and n.endswith("]") else n for n in nodeids]


def covers(entry: ConfirmedGroup, group: dict) -> bool:
    """Whether ``entry`` names ``group``'s cause: the same stage, the group's diagnosis the
    entry's (exactly: a group of another cause, or one diagnosed with alternatives, is not
    it), and every case the entry names one of the group's."""
    stages = group.get("stages") or [group.get("stage") or group.get("signature", "").split(" · ", 1)[0]]
    if entry.stage not in stages:  # one cause merged across stages shows in each
        return False
    if entry.diagnosis and group.get("diagnosis") != diagnosis_cause(entry.stage, entry.diagnosis):
        return False
    held = set(case_ids(group))
    return all(case in held for case in entry.cases)


def verdicts(run: ConfirmRun, name: str) -> str:
    """What the confirm script said of the divergence ``name`` (the start of what a verdict
    line names): REPRODUCES, GONE (any of its lines), or missing."""
    said = {verdict for verdict, rest in run.lines if rest.startswith(name)}
    return "missing" if not said else ("REPRODUCES" if said == {"REPRODUCES"} else "GONE")


def mark(
    group: dict,
    entries: list[ConfirmedGroup],
    run: ConfirmRun | dict | None,
    groups: list[dict] | None = None,
) -> tuple[str, str]:
    """The group's mark (CONFIRMED, FAILS, UNCONFIRMED, DISAGREE) and the why, in one line.
    ``groups``: all the engine's groups, so that an entry covering groups of two different
    causes (signatures) confirms none of them."""
    if group.get("outcome") == "reference-disagreement":
        return DISAGREE, "the references disagree with each other here: not a finding about the engine"
    covering = [e for e in entries if covers(e, group)]
    for entry in covering:
        causes = {g.get("signature") for g in groups or [group] if covers(entry, g)}
        if len(causes) > 1:
            return UNCONFIRMED, (
                f"the confirm entry {entry.describe()} covers {len(causes)} different causes: it names none"
            )
    if not covering:
        return UNCONFIRMED, "no hand reproduction through the engine's own API yet"
    if run is None:
        return FAILS, "the confirm script was not run"
    if isinstance(run, dict):
        run = ConfirmRun(**{**run, "lines": [tuple(x) for x in run.get("lines", [])]})
    if run.status != "ran":
        return FAILS, f"`{run.command}` {run.status}: {run.output.strip().splitlines()[-1:] or ''}"
    wanted = [name for e in covering for name in e.divergences]
    bad = [f"{name!r} {v}" for name in wanted if (v := verdicts(run, name)) != "REPRODUCES"]
    if bad:
        return FAILS, f"`{run.command}`: " + "; ".join(bad)
    return CONFIRMED, f"`{run.command}` reproduces it through the engine's own API: " + "; ".join(
        repr(n) for n in wanted
    )

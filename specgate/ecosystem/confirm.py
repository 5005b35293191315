"""Hand confirmation of the published root causes: each engine folder's confirm script
(``[confirm] command``) reproduces divergences through the engine's own public API, outside
specgate, against reference values written in as literals, printing one line per divergence,
``REPRODUCES: <what>: ...`` or ``GONE: <what>: ...``. ``[[confirm.groups]]`` says which
root-cause groups (a stage and a part of their signature) which divergences confirm.

Each group of the table is then marked (``mark``):

* **confirmed** — every divergence named for it printed REPRODUCES;
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
from specgate.ecosystem.spec import ConfirmedGroup, EngineSpec, child_path
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


def mark(group: dict, entries: list[ConfirmedGroup], run: ConfirmRun | dict | None) -> tuple[str, str]:
    """The group's mark (CONFIRMED, FAILS, UNCONFIRMED) and the why, in one line."""
    signature = group.get("signature", "")
    stage = group.get("stage") or signature.split(" · ", 1)[0]
    if group.get("outcome") == "reference-disagreement":
        return DISAGREE, "the references disagree with each other here: not a finding about the engine"
    # A group named by its diagnosed cause still carries the message signature of its
    # first case (``divergence_signature``): the one a confirm entry names.
    shown = (signature, group.get("divergence_signature") or "")
    covering = [e for e in entries if e.stage == stage and any(e.signature in s for s in shown)]
    if not covering:
        return UNCONFIRMED, "no hand reproduction through the engine's own API yet"
    if run is None:
        return FAILS, "the confirm script was not run"
    if isinstance(run, dict):
        run = ConfirmRun(**{**run, "lines": [tuple(x) for x in run.get("lines", [])]})
    if run.status != "ran":
        return FAILS, f"`{run.command}` {run.status}: {run.output.strip().splitlines()[-1:] or ''}"
    wanted = [name for e in covering for name in e.divergences]
    found = {}
    for name in wanted:
        verdicts = [verdict for verdict, rest in run.lines if name in rest]
        found[name] = (
            "missing" if not verdicts else ("REPRODUCES" if set(verdicts) == {"REPRODUCES"} else "GONE")
        )
    bad = [f"{name!r} {v}" for name, v in found.items() if v != "REPRODUCES"]
    if bad:
        return FAILS, f"`{run.command}`: " + "; ".join(bad)
    return CONFIRMED, f"`{run.command}` reproduces it through the engine's own API: " + "; ".join(
        repr(n) for n in wanted
    )

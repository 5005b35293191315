"""The repository's composite action (``action.yml``) as this machine can run it: its
``${{ ... }}`` expressions checked and substituted (``problems``, ``expand``), its ``run:``
steps run through bash as GitHub's runner runs them (``bash --noprofile --norc -eo
pipefail``, ``$GITHUB_OUTPUT`` read back into ``steps.<id>.outputs``), and its ``uses:``
steps played by stand-ins the caller gives (``run_action``).

Only the expressions the action needs are known: ``inputs.<declared input>``,
``github.action_path`` and ``steps.<id of an earlier step>.outputs.<name>``; any other
one is an error here (a typo in an input's name, a step read before it ran, a context
this helper cannot stand in for), never an empty string as GitHub would give."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
INPUT = re.compile(r"inputs\.([A-Za-z_][A-Za-z0-9_-]*)")
STEP_OUTPUT = re.compile(r"steps\.([A-Za-z_][A-Za-z0-9_-]*)\.outputs\.([A-Za-z_][A-Za-z0-9_-]*)")


class ActionError(Exception):
    """The action uses something this helper (or GitHub) cannot resolve."""


def expand(
    text: str, inputs: Mapping[str, str], action_path: str, outputs: Mapping[str, Mapping[str, str]]
) -> str:
    """``text`` with each ``${{ expr }}`` replaced by its value; ``outputs`` holds the
    outputs of the steps (by id) that ran before."""

    def value(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr == "github.action_path":
            return action_path
        if m := INPUT.fullmatch(expr):
            if m.group(1) not in inputs:
                raise ActionError(f"${{{{ {expr} }}}}: no input {m.group(1)!r} is declared")
            return inputs[m.group(1)]
        if m := STEP_OUTPUT.fullmatch(expr):
            if m.group(1) not in outputs:
                raise ActionError(f"${{{{ {expr} }}}}: no step with id {m.group(1)!r} ran before this one")
            return outputs[m.group(1)].get(m.group(2), "")
        raise ActionError(f"${{{{ {expr} }}}}: an expression this helper does not know")

    return EXPRESSION.sub(value, text)


def strings(node: Any) -> list[str]:
    """Every string in a step (keys' values, nested), in order."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, Mapping):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def problems(meta: Mapping[str, Any]) -> list[str]:
    """What GitHub's action metadata schema does not see: each expression names a
    declared input, the action's path or an earlier step's outputs; step ids are unique;
    the only ``if:`` is ``always()``. One line per problem."""
    inputs = {name: "" for name in meta.get("inputs") or {}}
    found, ran = [], {}
    expressions = [("outputs", s) for s in strings(meta.get("outputs") or {})]
    steps = (meta.get("runs") or {}).get("steps") or []
    for i, step in enumerate(steps):
        where = f"step {i + 1} ({step.get('name') or step.get('uses') or step.get('id')})"
        for text in strings({k: v for k, v in step.items() if k != "if"}):
            try:
                expand(text, inputs, "", ran)
            except ActionError as exc:
                found.append(f"{where}: {exc}")
        if step.get("if", "always()") != "always()":
            found.append(f"{where}: if: {step['if']!r} (only always() is run here)")
        if "id" in step:
            if step["id"] in ran:
                found.append(f"{where}: a second step with id {step['id']!r}")
            ran[step["id"]] = {}
    for where, text in expressions:
        try:
            expand(text, inputs, "", ran)
        except ActionError as exc:
            found.append(f"{where}: {exc}")
    return found


@dataclass
class Run:
    """One run of the action: each step's name and status (``None``: skipped after a
    failure), the action's status (its first failing step's), the steps' outputs."""

    steps: list[tuple[str, int | None]] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        return next((s for _, s in self.steps if s), 0)


def run_action(
    meta: Mapping[str, Any],
    given: Mapping[str, str],
    action_path: Path,
    workspace: Path,
    env: Mapping[str, str],
    stand_ins: Mapping[str, Callable[[dict[str, str]], None]],
    timeout: float = 1800,
) -> Run:
    """Run the composite action's steps in ``workspace`` with the inputs ``given`` (the
    declared defaults for the rest); ``stand_ins`` plays each ``uses:`` step, by the action's
    name without its ``@ref``, given its expanded ``with:``. ``env`` must hold
    ``GITHUB_STEP_SUMMARY``."""
    declared = meta.get("inputs") or {}
    if unknown := sorted(set(given) - set(declared)):
        raise ActionError(f"inputs not declared by the action: {', '.join(unknown)}")
    inputs = {name: str(spec.get("default", "")) for name, spec in declared.items()}
    inputs.update(given)
    if missing := [n for n, spec in declared.items() if spec.get("required") and not inputs[n]]:
        raise ActionError(f"required inputs missing: {', '.join(missing)}")
    run = Run()
    for i, step in enumerate(meta["runs"]["steps"]):
        name = step.get("name") or step.get("uses") or f"step {i + 1}"
        if run.status and step.get("if") != "always()":
            run.steps.append((name, None))
            continue
        if "uses" in step:
            action = step["uses"].split("@", 1)[0]
            if action not in stand_ins:
                raise ActionError(f"no stand-in for {step['uses']}")
            stand_ins[action](
                {
                    k: expand(str(v), inputs, str(action_path), run.outputs)
                    for k, v in (step.get("with") or {}).items()
                }
            )
            run.steps.append((name, 0))
            continue
        if step.get("shell") != "bash":
            raise ActionError(f"{name}: only shell: bash steps are run here")
        output = workspace.parent / f"github-output-{i}"
        output.write_text("", encoding="utf-8")
        step_env = {**env, "GITHUB_OUTPUT": str(output), "GITHUB_ACTION_PATH": str(action_path)}
        step_env.update(
            {
                k: expand(str(v), inputs, str(action_path), run.outputs)
                for k, v in (step.get("env") or {}).items()
            }
        )
        script = expand(step["run"], inputs, str(action_path), run.outputs)
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=workspace, env=step_env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        seconds = time.monotonic() - started
        run.logs.append(
            f"== {name} (exit {proc.returncode}, {seconds:.0f} s)\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )
        run.steps.append((name, proc.returncode))
        if "id" in step:
            run.outputs[step["id"]] = dict(
                line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines() if "=" in line
            )
    return run


def clean_env() -> dict[str, str]:
    """This process's environment without what points into its own checkout or venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

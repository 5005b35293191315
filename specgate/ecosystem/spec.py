"""One engine folder's ``engine.toml`` (``EngineSpec.load`` checks every key) and the
placeholders of its command lines.

Placeholders are filled so that the command a gate run sees — and so the report stem
specgate derives from ``--impl`` — is the same on every machine: ``{here}`` is the folder
relative to the project (the gate runs start in the project root), ``{python}`` the
interpreter's file name and ``{node}`` ``node``, found through the ``PATH`` the runner
gives its children (``child_path``: this interpreter's folder first).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.supply.models import PROJECT_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ECOSYSTEM_DIR = PROJECT_ROOT / "impl" / "ecosystem"
INSTALLERS = ("pip", "npm")


class EcosystemError(ValueError):
    """An unusable engine.toml or runner argument (reported as one line)."""


@dataclass
class ConfirmedGroup:
    """A ``[[confirm.groups]]`` entry: one root cause of ``stage``, named precisely — by its
    diagnosis (``diagnosis``: the name of a hypothesis of ``specgate.diagnose``'s catalogue
    for the stage, ``a+b`` for two together) and/or by case ids (``cases``: ``model/case``
    as in the gate's node ids, every one of which the group must hold) — and the
    divergences of the confirm script (``divergences``: the start of what each verdict line
    names) that must all print REPRODUCES for it to be *confirmed* (``confirm.covers``)."""

    stage: str
    divergences: list[str]
    diagnosis: str = ""
    cases: list[str] = field(default_factory=list)

    def describe(self) -> str:
        named = ([f"diagnosis {self.diagnosis}"] if self.diagnosis else []) + [
            f"case {c}" for c in self.cases
        ]
        return f"{self.stage} ({', '.join(named)})"


#: The keys of a ``[[confirm.groups]]`` entry.
CONFIRM_KEYS = {"stage", "diagnosis", "cases", "divergences"}


@dataclass
class EngineSpec:
    """One engine folder's ``engine.toml``."""

    folder: Path
    name: str
    package: str
    version: str
    installer: str
    impl: str
    stages: list[str]
    models: list[str]
    server: str | None = None
    ci_models: list[str] = field(default_factory=list)
    ci_max_cases: int = 4
    ci_stages: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: Seconds the full table's run took on a quiet 2-core machine (``budgets``).
    cost: float | None = None
    #: The confirm script's command line (placeholders as ``impl``), and what it confirms.
    confirm: str | None = None
    confirm_groups: list[ConfirmedGroup] = field(default_factory=list)
    #: Why this engine cannot run here: a row saying so, never installed or gated.
    unavailable: str | None = None

    @property
    def key(self) -> str:
        return self.folder.name

    @classmethod
    def load(cls, folder: Path) -> EngineSpec:
        path = folder / "engine.toml"
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise EcosystemError(f"{path}: cannot read it: {exc}") from None

        def text(key: str, table: dict[str, Any] = data) -> str:
            value = table.get(key)
            if not isinstance(value, str) or not value.strip():
                raise EcosystemError(f"{path}: {key!r} must be a non-empty string, got {value!r}")
            return value.strip()

        def names(key: str, table: dict[str, Any] = data) -> list[str]:
            value = table.get(key)
            if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                raise EcosystemError(f"{path}: {key!r} must be a non-empty list of strings, got {value!r}")
            return list(value)

        from specgate.stages import GATE_STAGES, known_rows

        known = known_rows()
        stages = names("stages")
        ci = data.get("ci", {})
        ci_stages = names("stages", ci) if "stages" in ci else stages
        if unknown := sorted(set(stages + ci_stages) - known):
            raise EcosystemError(
                f"{path}: unknown stage(s) {', '.join(unknown)}; known: {', '.join(GATE_STAGES)}"
            )
        installer = text("installer")
        if installer not in INSTALLERS:
            raise EcosystemError(f"{path}: installer {installer!r} is not one of {', '.join(INSTALLERS)}")
        max_cases = ci.get("max_cases", 4)
        if not isinstance(max_cases, int) or isinstance(max_cases, bool) or max_cases < 1:
            raise EcosystemError(f"{path}: [ci] max_cases must be a positive integer, got {max_cases!r}")
        env = data.get("env", {})
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and k.startswith("SPECGATE_") and isinstance(v, str) for k, v in env.items()
        ):
            raise EcosystemError(f"{path}: [env] must map SPECGATE_* variables to strings, got {env!r}")
        cost = data.get("cost")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or cost <= 0):
            raise EcosystemError(f"{path}: cost must be a positive number of seconds, got {cost!r}")
        confirm = data.get("confirm", {})
        if not isinstance(confirm, dict):
            raise EcosystemError(f"{path}: [confirm] must be a table, got {confirm!r}")
        groups = []
        for entry in confirm.get("groups", []):
            if not isinstance(entry, dict):
                raise EcosystemError(f"{path}: [[confirm.groups]] entries must be tables, got {entry!r}")
            groups.append(confirm_entry(path, entry, known, text, names))
        if groups and "command" not in confirm:
            raise EcosystemError(f"{path}: [[confirm.groups]] without a [confirm] command to run")
        spec = cls(
            folder=folder.resolve(),
            name=text("name"),
            package=text("package"),
            version=text("version"),
            installer=installer,
            impl=text("impl"),
            stages=stages,
            models=names("models"),
            server=text("server") if "server" in data else None,
            ci_models=names("models", ci) if "models" in ci else names("models")[:1],
            ci_max_cases=max_cases,
            ci_stages=ci_stages,
            env=dict(env),
            cost=float(cost) if cost is not None else None,
            confirm=text("command", confirm) if "command" in confirm else None,
            confirm_groups=groups,
            unavailable=text("unavailable") if "unavailable" in data else None,
        )
        if spec.server is None and "{port}" in spec.impl:
            raise EcosystemError(f"{path}: impl uses {{port}} but there is no server line to start")
        for template in filter(None, [spec.impl, spec.server, spec.confirm]):  # an unknown placeholder: now
            spec.fill(template, port="0", gguf="model.gguf", model="model")
        return spec

    @property
    def here(self) -> str:
        """The folder as the gate runs name it: relative to the project root (their working
        directory) when it lies inside, else absolute."""
        try:
            return str(self.folder.relative_to(PROJECT_ROOT.resolve()))
        except ValueError:
            return str(self.folder)

    def fill(self, template: str, quote: bool = True, **values: str) -> str:
        """``template`` with ``{python}``, ``{node}``, ``{here}`` (and ``values``) filled in,
        each shell-quoted so that paths with spaces stay one word (``quote=False``: a URL).
        Machine-independent: run it from the project root with ``child_path()`` as PATH."""
        known = {"python": Path(sys.executable).name, "node": "node", "here": self.here}
        known.update(values)
        try:
            return re.sub(
                r"\{(\w+)\}",
                lambda m: shlex.quote(known[m.group(1)]) if quote else known[m.group(1)],
                template,
            )
        except KeyError as exc:
            raise EcosystemError(
                f"{self.folder}/engine.toml: unknown placeholder {{{exc.args[0]}}}"
            ) from None


def confirm_entry(
    path: Path, entry: dict[str, Any], known: set[str], text: Any, names: Any
) -> ConfirmedGroup:
    """One ``[[confirm.groups]]`` entry, checked: a known stage, a cause named by a diagnosis
    the stage's catalogue holds and/or case ids, never by a part of a message signature
    (one such part once confirmed groups of other causes)."""
    if unknown := sorted(set(entry) - CONFIRM_KEYS):
        hint = (
            " (name the cause by diagnosis = ... and/or cases = [...], not by a signature)"
            if "signature" in unknown
            else ""
        )
        raise EcosystemError(
            f"{path}: [[confirm.groups]] has unknown key(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(CONFIRM_KEYS))}{hint}"
        )
    stage = text("stage", entry)
    if stage not in known:
        raise EcosystemError(f"{path}: [[confirm.groups]] names unknown stage {stage!r}")
    group = ConfirmedGroup(
        stage,
        names("divergences", entry),
        text("diagnosis", entry) if "diagnosis" in entry else "",
        names("cases", entry) if "cases" in entry else [],
    )
    if not group.diagnosis and not group.cases:
        raise EcosystemError(
            f"{path}: a [[confirm.groups]] entry of {stage} names no cause: give diagnosis and/or cases"
        )
    if group.diagnosis:
        diagnosis_cause(stage, group.diagnosis, path)  # an unknown name: now
    return group


def diagnosis_cause(stage: str, name: str, path: Path | str = "engine.toml") -> str:
    """The cause a diagnosed group of ``stage`` carries (its ``diagnosis``) for the
    hypothesis ``name`` of the stage's catalogue (``a+b``: both, as ``Diagnosis.cause``
    joins them); an EcosystemError for a name the catalogue lacks."""
    from specgate.diagnose.diagnoser import hypotheses_of

    hypotheses = {h.name: h for h in hypotheses_of(stage)}
    parts = name.split("+")
    if unknown := [p for p in parts if p not in hypotheses]:
        raise EcosystemError(
            f"{path}: [[confirm.groups]] of {stage} names unknown diagnosis {'+'.join(unknown)!r}; known: "
            f"{', '.join(hypotheses) or 'none (the stage is not diagnosed)'}"
        )
    return "; and it ".join(hypotheses[p].cause for p in parts)


def child_path(path: str | None = None) -> str:
    """The PATH of the runner's children: this interpreter's folder first (so ``{python}``
    is this interpreter), then node's (so ``{node}`` is the node found now), then ``path``."""
    path = os.environ.get("PATH", "") if path is None else path
    first = [str(Path(sys.executable).parent)]
    if node := shutil.which("node"):
        first.append(str(Path(node).parent))
    return os.pathsep.join([*first, path]) if path else os.pathsep.join(first)


def discover(root: Path = ECOSYSTEM_DIR) -> list[Path]:
    """The engine folders under ``root`` (those holding an engine.toml), by name."""
    return sorted(p.parent for p in Path(root).glob("*/engine.toml"))

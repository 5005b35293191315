"""The ecosystem table: install every third-party engine of ``impl/ecosystem/*/``, gate it,
and write ``reports/ecosystem.md`` / ``reports/ecosystem.html`` (``nox -s ecosystem``).

Each engine folder holds an ``engine.toml`` (ECOSYSTEM.md's "Adding an engine"; the
keys are checked by ``EngineSpec.load``). For each engine, in folder order:

1. **install** it (``pip install package==version`` into this interpreter, or ``npm ci``
   in its folder), capturing the installer's output: an engine that cannot be installed
   is a row *unavailable* with the installer's message, never dropped;
2. **export** the tokenizer files of its models into ``$SPECGATE_EXPORT_DIR/<model id>/``
   (``specgate models export``), for engines that load ``tokenizer.json``;
3. **start its server** when ``engine.toml`` has a ``server`` line (one per model, on a
   free port, tied to our lifetime through ``impl.lifeline``), and fill ``{port}`` into ``impl``;
4. **gate** it: ``pytest tests/gates --impl ... --stages ... --models ... --report-dir ...``
   in a subprocess, within the engine's time budget — an engine still running at the end
   of its budget is killed with everything it started and reported as a *timeout*;
5. read back its JSON report(s) (``specgate.report``): the matrix counts and the
   root-cause groups with their minimized reproducers (``specgate.triage``).

The CI sample (``tests/ecosystem/test_adapters_sample.py``) runs step 4 on the
``[ci]`` section: one model, ``--max-cases N`` cases per stage.

    python -m specgate.ecosystem install [--status FILE]        install every engine, record the outcome
    python -m specgate.ecosystem run [--engines a,b] [--budget S] [--total-budget S] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from impl.process import lifeline
from specgate import files, report, report_html, verdict
from specgate.gate import HEADINGS, OUTCOMES
from specgate.models import PROJECT_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ECOSYSTEM_DIR = PROJECT_ROOT / "impl" / "ecosystem"
INSTALLERS = ("pip", "npm")
#: Root-cause groups shown per engine in the table.
TOP_CAUSES = 3
SERVER_STARTUP_SECONDS = 180.0
MESSAGE_CHARS = 1500


class EcosystemError(ValueError):
    """An unusable engine.toml or runner argument (reported as one line)."""


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

        from specgate.plugin import CLASSED_STAGES, CONFORMANCE_CLASSES, GATE_STAGES

        known = {*GATE_STAGES, *(f"{s}/{c}" for s in CLASSED_STAGES for c in CONFORMANCE_CLASSES)}
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
        )
        if spec.server is None and "{port}" in spec.impl:
            raise EcosystemError(f"{path}: impl uses {{port}} but there is no server line to start")
        for template in filter(None, [spec.impl, spec.server]):  # an unknown placeholder: say so now
            spec.fill(template, port="0", gguf="model.gguf", model="model")
        return spec

    def fill(self, template: str, quote: bool = True, **values: str) -> str:
        """``template`` with ``{python}``, ``{node}``, ``{here}`` (and ``values``) filled in,
        each shell-quoted so that paths with spaces stay one word (``quote=False``: a URL)."""
        known = {"python": sys.executable, "node": shutil.which("node") or "node", "here": str(self.folder)}
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


def discover(root: Path = ECOSYSTEM_DIR) -> list[Path]:
    """The engine folders under ``root`` (those holding an engine.toml), by name."""
    return sorted(p.parent for p in Path(root).glob("*/engine.toml"))


# ---------------------------------------------------------------------------
# installing


@dataclass
class Install:
    status: str  # "installed" | "already installed" | "unavailable"
    message: str = ""  # the installer's output (its tail) when it failed; what ran otherwise
    seconds: float = 0.0


def installed_version(spec: EngineSpec) -> str | None:
    """The engine's version as installed now (pip: this interpreter's distribution;
    npm: the folder's node_modules), or None."""
    if spec.installer == "pip":
        try:
            return importlib.metadata.version(re.sub(r"\[.*\]$", "", spec.package))
        except importlib.metadata.PackageNotFoundError:
            return None
    manifest = spec.folder / "node_modules" / spec.package / "package.json"
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None


def extras_present(spec: EngineSpec) -> bool:
    """Whether every distribution a pip package's extras (``name[extra]``) require is
    installed (versions are pip's business once it has to run)."""
    match = re.fullmatch(r"([^\[]+)\[(.+)\]", spec.package)
    if spec.installer != "pip" or match is None:
        return True
    extras = {e.strip() for e in match.group(2).split(",")}
    for requirement in importlib.metadata.requires(match.group(1)) or []:
        wanted = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if wanted is None or wanted.group(1) not in extras:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def install_command(spec: EngineSpec, pip_args: list[str]) -> list[str]:
    if spec.installer == "pip":
        return [sys.executable, "-m", "pip", "install", "-q", *pip_args, f"{spec.package}=={spec.version}"]
    return ["npm", "ci", "--no-audit", "--no-fund"]


def install(spec: EngineSpec, pip_args: list[str] = (), timeout: float = 900.0) -> Install:  # type: ignore[assignment]
    """Install ``spec`` unless its pinned version (and, for ``name[extra]``, what the
    extras need) is already there."""
    start = time.monotonic()
    if installed_version(spec) == spec.version and extras_present(spec):
        return Install("already installed", f"{spec.package} {spec.version}")
    argv = install_command(spec, list(pip_args))
    if shutil.which(argv[0]) is None:
        return Install("unavailable", f"{argv[0]} not found on PATH (needed to install {spec.package})")
    try:
        proc = lifeline.run(
            argv, cwd=spec.folder, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return Install("unavailable", f"`{shlex.join(argv)}` did not finish within {timeout:g} s", timeout)
    seconds = round(time.monotonic() - start, 1)
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return Install(
            "unavailable", f"`{shlex.join(argv)}` exited {proc.returncode}: {tail(output)}", seconds
        )
    found = installed_version(spec)
    if found != spec.version:
        return Install(
            "unavailable",
            f"`{shlex.join(argv)}` succeeded but {spec.package} is at {found}, not {spec.version}",
        )
    return Install("installed", f"`{shlex.join(argv)}`", seconds)


def tail(text: str, limit: int = MESSAGE_CHARS) -> str:
    """The last ``limit`` characters of an installer's or a run's output (where the error is)."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


# ---------------------------------------------------------------------------
# servers and runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(spec: EngineSpec, model_id: str, log: Path, deadline: float):
    """The engine's server for ``model_id`` on a free port, up (accepting connections)
    before the yield and stopped after; yields the port. Tied to our lifetime."""
    from specgate import models as model_cache

    port = free_port()
    gguf = str(model_cache.model_ref(model_id).gguf)
    argv = shlex.split(spec.fill(spec.server or "", gguf=gguf, port=str(port), model=model_id))
    with open(log, "wb") as out:
        proc = lifeline.spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(proc, port, log, min(deadline, time.monotonic() + SERVER_STARTUP_SECONDS))
        yield port
    finally:
        stop(proc)


def wait_for_port(proc: subprocess.Popen[Any], port: int, log: Path, deadline: float) -> None:
    while True:
        if proc.poll() is not None:
            raise RunProblem("error", f"server exited ({proc.returncode}) before listening: {log_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RunProblem("timeout", f"server not listening on port {port} in time: {log_tail(log)}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after 10 s."""
    lifeline.stop_group(proc, grace=10)


def log_tail(log: Path) -> str:
    try:
        return tail(log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "(no log)"


class RunProblem(Exception):
    """A run that produced no report: ``status`` is "timeout" or "error"."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def gate_command(
    impl: str, stages: list[str], models: list[str], report_dir: Path, extra: list[str]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "tests/gates",
        "-p",
        "no:cacheprovider",
        "-q",
        "--impl",
        impl,
        "--stages",
        ",".join(stages),
        "--models",
        ",".join(models),
        "--report-dir",
        str(report_dir),
        *extra,
    ]


#: Seconds a gate run interrupted at its deadline gets to write its report of the cases so far.
INTERRUPT_GRACE = 20.0


def run_gates(argv: list[str], log: Path, deadline: float, env: dict[str, str]) -> int:
    """The gate run in its own process group; its output goes to ``log``. At the deadline
    it is interrupted (SIGINT: pytest still writes the report of the cases gated so far),
    then killed with everything it started; either way a RunProblem "timeout"."""
    with open(log, "wb") as out:
        proc = lifeline.spawn(argv, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        return proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=INTERRUPT_GRACE)
        raise RunProblem("timeout", "") from None
    finally:
        lifeline.kill_group(proc)  # what the run started and left behind goes too
        proc.wait()


@dataclass
class EngineRun:
    """One engine's row of the table."""

    key: str
    name: str
    package: str
    version: str
    installer: str
    install: Install
    status: str = "not run"  # "ran" | "timeout" | "error" | "unavailable" | "not run"
    message: str = ""
    seconds: float = 0.0
    budget: float = 0.0
    reports: list[dict[str, Any]] = field(default_factory=list)
    report_files: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Counter]:
        """Outcome counts per stage, summed over models and report files."""
        out: dict[str, Counter] = {}
        for payload in self.reports:
            for row in payload["matrix"]:
                out.setdefault(row["stage"], Counter()).update({o: row[o] for o in OUTCOMES})
        return dict(sorted(out.items()))

    def groups(self) -> list[dict[str, Any]]:
        """The root-cause groups of all its reports, largest first."""
        found = [g for payload in self.reports for g in payload.get("groups", [])]
        return sorted(found, key=lambda g: -g["count"])

    def verdict(self) -> list[str]:
        return [v for payload in self.reports for v in verdict.rule_problems(payload)]


def run_engine(
    spec: EngineSpec,
    install_result: Install,
    out_dir: Path,
    budget: float,
    *,
    sample: bool = False,
    export_dir: Path | None = None,
    extra: list[str] = (),  # type: ignore[assignment]
) -> EngineRun:
    """Gate one engine (its full table, or with ``sample`` its ``[ci]`` sample) within
    ``budget`` seconds; never raises for the engine's own trouble."""
    row = EngineRun(
        spec.key, spec.name, spec.package, spec.version, spec.installer, install_result, budget=budget
    )
    if install_result.status == "unavailable":
        row.status, row.message = "unavailable", install_result.message
        return row
    models = spec.ci_models if sample else spec.models
    stages = spec.ci_stages if sample else spec.stages
    extra = [*extra, *(["--max-cases", str(spec.ci_max_cases)] if sample else [])]
    engine_dir = out_dir / spec.key
    shutil.rmtree(engine_dir, ignore_errors=True)
    engine_dir.mkdir(parents=True)
    env = {**os.environ, **spec.env}
    if export_dir is not None:
        env["SPECGATE_EXPORT_DIR"] = str(export_dir)
    start = time.monotonic()
    deadline = start + budget
    # A server serves one model: one server and one gate run per model.
    batches = [[m] for m in models] if spec.server else [models]
    statuses = []
    try:
        for batch in batches:
            statuses.append(gate_batch(spec, stages, batch, engine_dir, deadline, env, extra))
        row.status = "ran"
    except RunProblem as problem:
        row.status, row.message = problem.status, problem.message
    row.seconds = round(time.monotonic() - start, 1)
    unreadable = []
    for path in sorted(engine_dir.glob("**/parity-*.json")):
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            unreadable.append(f"{path.relative_to(out_dir)}: {exc} (see its gates.log)")
            continue
        if payload.get("startup_failure"):  # the engine did not start: its reason, no counts
            statuses.append(payload["startup_failure"])
            continue
        row.reports.append(with_short_paths(payload))
        row.report_files.append(str(path))
    if unreadable and row.status == "ran":
        row.status, row.message = "error", "unreadable report: " + "; ".join(unreadable)
    if row.status == "timeout" and not row.message:
        gated = sum(len(payload["cases"]) for payload in row.reports)
        row.message = f"not finished within its budget of {budget:g} s; stopped" + (
            f": the counts are of the {gated} cases gated before" if gated else ""
        )
    if row.status == "ran" and len(row.reports) < len(batches):
        row.status = "error"
        row.message = "; ".join(s for s in statuses if s) or "the gate run wrote no report"
    return row


def with_short_paths(payload: dict[str, Any]) -> dict[str, Any]:
    """The report with its reproducer files named relative to the project when inside it."""
    for group in payload.get("groups", []):
        with contextlib.suppress(TypeError, ValueError):
            group["reproducer_file"] = str(Path(group["reproducer_file"]).relative_to(PROJECT_ROOT))
    return payload


def gate_batch(
    spec: EngineSpec,
    stages: list[str],
    models: list[str],
    engine_dir: Path,
    deadline: float,
    env: dict[str, str],
    extra: list[str],
) -> str:
    """One gate run over ``models`` (with the engine's server for them, if it has one);
    returns "" or, when it wrote no report, why (its output's tail)."""
    report_dir = engine_dir / "-".join(models) if spec.server else engine_dir
    report_dir.mkdir(parents=True, exist_ok=True)
    log = report_dir / "gates.log"
    with contextlib.ExitStack() as stack:
        values = {}
        if spec.server:
            values["port"] = str(
                stack.enter_context(running_server(spec, models[0], report_dir / "server.log", deadline))
            )
        impl = spec.fill(spec.impl, quote=not spec.impl.startswith("http:"), **values)
        status = run_gates(gate_command(impl, stages, models, report_dir, extra), log, deadline, env)
    if not list(report_dir.glob("parity-*.json")):
        return f"pytest exited {status} without a report: {why_stopped(log)}"
    return ""


def why_stopped(log: Path) -> str:
    """What a gate run that wrote no report said about it: its usage-error or exit lines
    (``ERROR: ...``, ``Exit: ...``), else the tail of its output."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    said = [
        m.group(1).strip(" !")
        for m in re.finditer(r"^(?:ERROR: |! _pytest\.outcomes\.Exit: )(.*)$", text, re.M)
    ]
    return tail("\n".join(said)) if said else log_tail(log)


# ---------------------------------------------------------------------------
# the whole table


def export_tokenizers(model_ids: set[str], export_dir: Path) -> dict[str, str]:
    """``specgate models export ID DIR/ID`` for each model; returns the failures by model."""
    from specgate import models as model_cache
    from specgate.export import export

    problems = {}
    for model_id in sorted(model_ids):
        try:
            export(model_cache.model_ref(model_id).gguf, export_dir / model_id)
        except Exception as exc:  # one model's export failing is reported, not fatal
            problems[model_id] = f"{type(exc).__name__}: {exc}"
    return problems


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "node": node_version(),
    }


def node_version() -> str:
    node = shutil.which("node")
    if node is None:
        return "not found"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return "unknown"


@dataclass
class Table:
    rows: list[EngineRun]
    started: str
    seconds: float
    machine_before: dict[str, Any]
    machine_after: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # engine.toml errors, export failures


def run_all(
    root: Path = ECOSYSTEM_DIR,
    out_dir: Path = PROJECT_ROOT / "reports",
    *,
    engines: list[str] | None = None,
    budget: float = 600.0,
    total_budget: float = 1800.0,
    pip_args: list[str] = (),  # type: ignore[assignment]
    extra: list[str] = (),  # type: ignore[assignment]
) -> Table:
    """Install and gate every engine under ``root``; write the table; return it."""
    start = time.monotonic()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    before = machine()
    specs, problems = [], []
    for folder in discover(root):
        if engines and folder.name not in engines:
            continue
        try:
            specs.append(EngineSpec.load(folder))
        except EcosystemError as exc:
            problems.append(str(exc))
    if engines and (unknown := sorted(set(engines) - {s.key for s in specs})):
        problems.append(f"no usable engine folder named {', '.join(unknown)} under {root}")
    runs_dir = out_dir / "ecosystem"
    export_dir = runs_dir / "export"
    shutil.rmtree(export_dir, ignore_errors=True)
    export_dir.mkdir(parents=True)
    installs = {spec.key: install(spec, pip_args) for spec in specs}
    wanted = {m for s in specs if installs[s.key].status != "unavailable" for m in s.models}
    problems += [
        f"tokenizer export of {m} failed: {why}" for m, why in export_tokenizers(wanted, export_dir).items()
    ]
    deadline = start + total_budget
    rows = []
    to_run = [s for s in specs if installs[s.key].status != "unavailable"]
    for spec in specs:
        left = deadline - time.monotonic()
        # Each engine still to run gets at least an even share of what is left, so a slow
        # one early in the order cannot starve the rest; cheap engines leave more for later.
        share = left / max(len(to_run), 1)
        if spec in to_run:
            to_run.remove(spec)
        if left <= 1 and installs[spec.key].status != "unavailable":
            row = EngineRun(
                spec.key, spec.name, spec.package, spec.version, spec.installer, installs[spec.key]
            )
            row.status, row.message = (
                "timeout",
                f"not started: the total budget of {total_budget:g} s was spent",
            )
            rows.append(row)
            continue
        rows.append(
            run_engine(
                spec, installs[spec.key], runs_dir, min(budget, share), export_dir=export_dir, extra=extra
            )
        )
        print(f"specgate ecosystem: {spec.key}: {rows[-1].status} in {rows[-1].seconds} s", flush=True)
    table = Table(rows, started, round(time.monotonic() - start, 1), before, machine(), problems)
    write_table(table, out_dir)
    return table


# ---------------------------------------------------------------------------
# the reports


def markdown(table: Table) -> str:
    lines = [
        f"<!-- generated by `nox -s ecosystem` on {table.started} — do not edit -->",
        "# specgate ecosystem table",
        "",
        f"_Generated by `nox -s ecosystem` on {table.started} — do not edit; regenerate instead._",
        "",
        machine_line(table),
        "",
        "How each third-party engine of `impl/ecosystem/` conforms, gated stage by stage against the "
        "reference snapshots (`tests/gates`). Outcomes: pass, fail, refused (the engine declined "
        "with a reason), n/a (not offered), disagree (the references disagree), error (crash, hang, "
        "protocol violation).",
        "",
        "| engine | package | version | installer | install | run | seconds |",
        "|---|---|---|---|---|---|---:|",
    ]
    for row in table.rows:
        lines.append(
            f"| {row.name} | `{row.package}` | {row.version} | {row.installer} | {row.install.status} "
            f"| {row.status} | {row.seconds:g} |"
        )
    lines += ["", "## Engines × stages", "", "| engine | stage | " + " | ".join(HEADINGS) + " |"]
    lines.append("|---|---|" + "---:|" * len(HEADINGS))
    for row in table.rows:
        counts = row.counts()
        if not counts:
            lines.append(f"| {row.name} | — | " + " | ".join("—" for _ in HEADINGS) + " |")
        for stage, c in counts.items():
            lines.append(f"| {row.name} | {stage} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES) + " |")
    if table.problems:
        lines += ["", "## Problems", "", *[f"- {p}" for p in table.problems]]
    for row in table.rows:
        lines += ["", f"## {row.name}", "", *engine_markdown(row)]
    return "\n".join(lines) + "\n"


def machine_line(table: Table) -> str:
    m, after = table.machine_before, table.machine_after
    return (
        f"Machine: {m['cores']} cores, load {'/'.join(map(str, m['load']))} before and "
        f"{'/'.join(map(str, after['load']))} after (1/5/15 min), {m['platform']}, Python {m['python']}, "
        f"Node {m['node']}; the whole run took {table.seconds:g} s."
    )


def engine_markdown(row: EngineRun) -> list[str]:
    lines = [
        f"`{row.package}` {row.version} ({row.installer}): install {row.install.status}, run {row.status} "
        f"in {row.seconds:g} s of a {row.budget:g} s budget."
    ]
    if row.message:
        lines += ["", "```", row.message.strip()[:MESSAGE_CHARS], "```"]
    lines += [f"The run fails: {v}  " for v in row.verdict()]
    groups = row.groups()
    if groups:
        lines += ["", f"Top root causes ({min(len(groups), TOP_CAUSES)} of {len(groups)} groups):", ""]
        for number, group in enumerate(groups[:TOP_CAUSES], 1):
            lines += [
                line.replace("### ", "### " + row.name + " · ", 1)
                for line in report.group_markdown(number, group)
            ]
    elif row.reports:
        lines += ["", "No failures, errors or reference disagreements."]
    return lines


def html(table: Table) -> str:
    """The same table as one self-contained page in the parity report's style."""
    head = "".join(f"<th>{h}</th>" for h in HEADINGS)
    summary = "".join(
        f"<tr><td>{escape(r.name)}</td><td><code>{escape(r.package)}</code></td><td>{escape(r.version)}</td>"
        f"<td>{escape(r.installer)}</td><td>{escape(r.install.status)}</td><td>{escape(r.status)}</td>"
        f'<td class="count">{r.seconds:g}</td></tr>'
        for r in table.rows
    )
    matrix = []
    for r in table.rows:
        for stage, c in r.counts().items() or [("—", Counter())]:
            cells = "".join(
                f'<td class="count o-{o}{" zero" if not c.get(o, 0) else ""}">{c.get(o, 0)}</td>'
                for o in OUTCOMES
            )
            matrix.append(f"<tr><td>{escape(r.name)}</td><td>{escape(stage)}</td>{cells}</tr>")
    sections = []
    for r in table.rows:
        parts = [
            f"<h2>{escape(r.name)}</h2>",
            f'<p class="note"><code>{escape(r.package)}</code> {escape(r.version)} ({escape(r.installer)}): '
            f"install {escape(r.install.status)}, run {escape(r.status)} in {r.seconds:g} s of a "
            f"{r.budget:g} s budget.</p>",
        ]
        if r.message:
            parts.append(f"<pre>{report_html.visible(r.message.strip()[:MESSAGE_CHARS])}</pre>")
        parts += [f'<p class="verdict">The run fails: {escape(v)}</p>' for v in r.verdict()]
        parts += [report_html._group(i, g) for i, g in enumerate(r.groups()[:TOP_CAUSES], 1)]
        sections.append("\n".join(parts))
    problems = "".join(f"<li>{escape(p)}</li>" for p in table.problems)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specgate ecosystem table</title><style>{report_html._CSS}</style></head>
<body>
<h1>specgate ecosystem table</h1>
<p class="note">Generated by <code>nox -s ecosystem</code> on {escape(table.started)}. {escape(machine_line(table))}</p>
<table id="engines"><tr><th>engine</th><th>package</th><th>version</th><th>installer</th><th>install</th>
<th>run</th><th>seconds</th></tr>{summary}</table>
<h2>Engines × stages</h2>
<table id="matrix"><tr><th>engine</th><th>stage</th>{head}</tr>{"".join(matrix)}</table>
{f"<h2>Problems</h2><ul>{problems}</ul>" if problems else ""}
{"".join(sections)}
</body></html>
"""


def write_table(table: Table, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page, data = out_dir / "ecosystem.md", out_dir / "ecosystem.html", out_dir / "ecosystem.json"
    files.write_text(md, markdown(table))
    files.write_text(page, html(table))
    summary = {
        **asdict(table),
        "rows": [{**asdict(r), "reports": None, "counts": r.counts()} for r in table.rows],
    }
    files.write_text(data, json.dumps(summary, indent=1, default=str))
    return [md, page, data]


# ---------------------------------------------------------------------------
# the CI sample's verdict and the command line


def sample_problem(row: EngineRun) -> str | None:
    """Why an engine's CI sample run shows a rotten adapter, or None: it must have run
    to the end and answered cases (passed or failed them), not only refused or errored."""
    if row.status != "ran":
        return f"{row.name}: {row.status}: {row.message}"
    counts = Counter()
    for per_stage in row.counts().values():
        counts.update(per_stage)
    answered = counts["pass"] + counts["fail"]
    if not answered:
        return (
            f"{row.name}: no case answered ({', '.join(f'{n} {o}' for o, n in sorted(counts.items())) or 'no cases'}); "
            f"first errors: {'; '.join(g['first_message'].splitlines()[0] for g in row.groups()[:2] if g['first_message'])}"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specgate.ecosystem",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "run"):
        p = sub.add_parser(name)
        p.add_argument("--root", type=Path, default=ECOSYSTEM_DIR, help="the engine folders' parent")
        p.add_argument("--engines", default="", help="comma-separated engine folder names (default: all)")
        p.add_argument("--pip-args", default="", help="extra pip install arguments (e.g. '--find-links DIR')")
    sub.choices["install"].add_argument(
        "--status", type=Path, default=PROJECT_ROOT / "reports" / "ecosystem-install.json"
    )
    run = sub.choices["run"]
    run.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports")
    run.add_argument("--budget", type=float, default=600.0, help="seconds per engine (default 600)")
    run.add_argument(
        "--total-budget", type=float, default=1800.0, help="seconds for all engines (default 1800)"
    )
    run.add_argument("--shrink-budget", type=float, default=60.0, help="per engine (default 60)")
    run.add_argument("--shrink-group-budget", type=float, default=15.0)
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()] or None
    pip_args = shlex.split(args.pip_args)
    if args.command == "install":
        return install_all(args.root, engines, pip_args, args.status)
    table = run_all(
        args.root,
        args.out,
        engines=engines,
        budget=args.budget,
        total_budget=args.total_budget,
        pip_args=pip_args,
        extra=[
            "--shrink-budget",
            str(args.shrink_budget),
            "--shrink-group-budget",
            str(args.shrink_group_budget),
        ],
    )
    print(markdown(table).split("\n## ", 2)[1] if "\n## " in markdown(table) else "")
    print(
        f"specgate ecosystem: {args.out / 'ecosystem.md'}, {args.out / 'ecosystem.html'} ({table.seconds:g} s)"
    )
    return 1 if table.problems else 0


def install_all(root: Path, engines: list[str] | None, pip_args: list[str], status_file: Path) -> int:
    """Install every engine and record each outcome in ``status_file`` (the CI sample
    test reads the installer's message from it). Exit 0 even when some are unavailable:
    that is a row of the table, and a failure of the CI sample test, not of the install."""
    statuses = {}
    for folder in discover(root):
        if engines and folder.name not in engines:
            continue
        try:
            spec = EngineSpec.load(folder)
        except EcosystemError as exc:
            statuses[folder.name] = asdict(Install("unavailable", str(exc)))
            continue
        result = install(spec, pip_args)
        statuses[folder.name] = asdict(result)
        print(f"specgate ecosystem: {folder.name}: {result.status} {result.message[:300]}", flush=True)
    status_file.parent.mkdir(parents=True, exist_ok=True)
    status_file.write_text(json.dumps(statuses, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except EcosystemError as exc:
        print(f"specgate ecosystem: {exc}", file=sys.stderr)
        sys.exit(2)

"""Installing an engine: ``pip install package==version`` into this interpreter, or
``npm ci`` in its folder, unless the pinned version is already there. An engine whose
installer fails is a row *unavailable* with the installer's message, never dropped."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from impl.process import lifeline
from specgate.ecosystem.spec import EcosystemError, EngineSpec, discover

MESSAGE_CHARS = 1500


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
    if spec.unavailable:
        return Install("unavailable", f"not installed: {spec.unavailable}")
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

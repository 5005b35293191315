"""Throwaway engine folders for the runner's and the CI sample's own tests, written
into a temp dir: the oracle served through the protocol, an adapter that exits at
once, one that hangs, a package version no index has."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SPECGATE_VERSION = importlib.metadata.version("specgate")

ORACLE = "cmd:{python} -m specgate.cli engine --impl oracle"
EXITS_AT_ONCE = "cmd:{python} -c 'raise SystemExit(3)'"


def engine_folder(
    root: Path,
    key: str,
    impl: str,
    *,
    package: str = "specgate",
    version: str = SPECGATE_VERSION,
    stages: tuple[str, ...] = ("split", "encode"),
    models: tuple[str, ...] = ("qwen3-vocab",),
    max_cases: int = 3,
) -> Path:
    """An engine folder ``root/key`` whose engine.toml gates ``impl`` (the installed
    specgate stands in for the package: already installed, nothing to fetch)."""
    folder = root / key
    folder.mkdir(parents=True)
    listed = ", ".join(f'"{s}"' for s in stages)
    chosen = ", ".join(f'"{m}"' for m in models)
    (folder / "engine.toml").write_text(
        f'name = "{key}"\npackage = "{package}"\nversion = "{version}"\ninstaller = "pip"\n'
        f"impl = {impl!r}\nstages = [{listed}]\nmodels = [{chosen}]\n"
        f"[ci]\nmodels = [{chosen}]\nmax_cases = {max_cases}\n",
        encoding="utf-8",
    )
    return folder


def hanging_adapter(root: Path) -> str:
    """``impl`` of an adapter that writes its pid to ``root/hang.pid`` and never answers."""
    script = root / "hang.py"
    script.write_text(
        f"import os, time\nopen({str(root / 'hang.pid')!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n",
        encoding="utf-8",
    )
    return f"cmd:{{python}} {script}"


def engine_unavailable(why: str) -> None:
    """An engine package, its node_modules or the model file a confirm script needs is
    missing: a failure under ``--live-references`` (``nox -s live`` installs every
    engine, so there it means an install went wrong), else a skip that says why."""
    from specgate.plugin import setup_missing

    setup_missing(why, remedy="nox -s live installs it: see reports/ecosystem-install.json")

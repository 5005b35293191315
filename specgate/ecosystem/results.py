"""The table as data: its rows (``gating.EngineRun``), when and on what machine it was made,
its problems, and which engines it holds (``engines``: a subset, or None for the full table)."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from specgate.ecosystem.gating import EngineRun


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
    #: The whole run's peak memory (the runner's process tree, installs included; PSS), in bytes.
    peak_bytes: int = 0

    #: The engine folders asked for (``--engines``), or None: the full table.
    engines: list[str] | None = None

    @property
    def stem(self) -> str:
        """``ecosystem`` for the full table, ``ecosystem-<a>+<b>`` for a subset."""
        return "ecosystem" if self.engines is None else "ecosystem-" + "+".join(sorted(self.engines))

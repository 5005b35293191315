"""pytest in a child process, the way the suite's own tests start one.

``run_pytest(*args)`` is ``python -m pytest -p no:cacheprovider *args`` run from the
project's root (or ``cwd``), its output captured, cut at ``timeout`` and tied to this
process (``impl.process.lifeline``: a run a failing test leaves behind does not outlive
the suite). ``planted_pytest(where, *args)`` runs this suite's conftest on test files a
test wrote into ``where``, in an environment of only ``PYTHONPATH`` and ``PATH``: nothing
of the calling run (its options, its ``SPECGATE_*`` settings) leaks into the planted one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from impl.process import lifeline

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 900  # seconds: a child run that hangs fails its test instead of hanging the suite


def run_pytest(
    *args: str | Path, cwd: Path = ROOT, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest -p no:cacheprovider *args`` in ``cwd``; ``env`` replaces the
    environment when given (None: this process's)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *map(str, args)]
    environ = None if env is None else dict(env)
    return lifeline.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environ)


def planted_pytest(
    where: Path, *args: str | Path, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """pytest with this suite's conftest on the planted test files in ``where``."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return run_pytest("-p", "conftest", *args, cwd=where, env=env, timeout=timeout)

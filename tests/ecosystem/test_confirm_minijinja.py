"""The minijinja divergences of impl/ecosystem/minijinja/confirm.py still reproduce with
the pinned package: the script exits 0 (each divergence printed as REPRODUCES)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

pytestmark = pytest.mark.live  # the engine package comes with the live session (nox -s live)
CONFIRM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem" / "minijinja" / "confirm.py"


def test_minijinja_divergences_reproduce():
    if importlib.util.find_spec("minijinja") is None:
        engine_unavailable("the minijinja package is not installed (pip install minijinja==3.0.5)")
    run = subprocess.run([sys.executable, str(CONFIRM)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr}"
    assert run.stdout.count("REPRODUCES") == 5, run.stdout
    assert_entries_reproduce("minijinja", run.stdout)

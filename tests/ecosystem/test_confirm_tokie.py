"""The tokie divergences of impl/ecosystem/tokie/confirm.py still reproduce with the
pinned package: the script exits 0 (each divergence printed as REPRODUCES). It reads
Qwen3's own tokenizer.json from specgate's model cache (downloaded with qwen3-vocab)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

pytestmark = pytest.mark.live  # the engine package comes with the live session (nox -s live)
CONFIRM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem" / "tokie" / "confirm.py"
MISSING_FILE = 2  # confirm.py's exit status when the tokenizer.json is not there


def test_tokie_divergences_reproduce():
    if importlib.util.find_spec("tokie") is None:
        engine_unavailable("the tokie package is not installed (pip install tokie==0.1.4)")
    env = {**os.environ, "RUST_BACKTRACE": "0"}  # tokie's panics stay one line on stderr
    run = subprocess.run([sys.executable, str(CONFIRM)], capture_output=True, text=True, timeout=300, env=env)
    if run.returncode == MISSING_FILE:
        engine_unavailable(f"the tokenizer file confirm.py needs is not cached: {run.stdout.strip()}")
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr}"
    assert run.stdout.count("REPRODUCES") == 5, run.stdout
    assert_entries_reproduce("tokie", run.stdout)

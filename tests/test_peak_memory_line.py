"""The session's peak-memory line (conftest.py): printed at the end of every run, with
the pytest process's own peak and its largest child's, measured by ``getrusage``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from impl.process import lifeline

ROOT = Path(__file__).resolve().parents[1]
CHILD_BYTES = 400_000_000

TEST = f"""
import subprocess, sys

def test_child_holds_memory():
    code = "b = bytearray({CHILD_BYTES}); b[::4096] = b'x' * len(b[::4096])"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_the_run_prints_its_own_and_its_largest_childs_peak(tmp_path):
    (tmp_path / "test_child.py").write_text(TEST, encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", str(tmp_path)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = lifeline.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    match = re.search(r"peak memory: pytest ([\d.]+) GB, largest child ([\d.]+) GB \(max RSS\)", proc.stdout)
    assert match, proc.stdout[-2000:]
    own, child = map(float, match.groups())
    assert 0.01 < own < 4.0
    assert CHILD_BYTES / 1e9 <= child < 2 * CHILD_BYTES / 1e9 + 0.1

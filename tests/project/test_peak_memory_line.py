"""The session's peak-memory line (tests/memory_profile.py): printed at the end of every
run, with the pytest process's own peak and the peak of pytest and its children together
(the process tree, sampled)."""

from __future__ import annotations

import re

import pytest

from tests.child_pytest import planted_pytest

CHILD_BYTES = 400_000_000

TEST = f"""
import subprocess, sys

def test_child_holds_memory():
    code = "import time; b = bytearray({CHILD_BYTES}); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def run_pytest_on(tmp_path, name: str, source: str, *options: str):
    """A pytest run, with this project's conftest, of one test file holding ``source``."""
    (tmp_path / name).write_text(source, encoding="utf-8")
    proc = planted_pytest(tmp_path, "-q", *options, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["one process", "xdist"])
def test_the_run_prints_its_own_and_its_childrens_peak(tmp_path, workers):
    """A child holding 400 MB for 1.5 s is in the tree's peak, on top of pytest's own
    size; pytest's own peak does not count it. Under xdist the controller samples the
    tree (the workers and what they start are its children; a worker samples nothing)."""
    proc = run_pytest_on(tmp_path, "test_child.py", TEST, *workers)
    match = re.search(
        r"peak memory: pytest ([\d.]+) GB; pytest and its children together ([\d.]+) GB "
        r"\(PSS, sampled every [\d.]+ s, during (\S+)\)",
        proc.stdout,
    )
    assert match, proc.stdout[-2000:]
    own, together = float(match.group(1)), float(match.group(2))
    assert 0.01 < own < CHILD_BYTES / 1e9, "the child's memory is not pytest's own"
    assert CHILD_BYTES / 1e9 <= together < own + 2 * CHILD_BYTES / 1e9 + 0.2, "the child is counted, once"
    assert match.group(3).endswith("test_child_holds_memory")


PEAK_BYTES = 300_000_000

TESTS_IN_PROCESS = f"""
def test_small():
    assert sum(range(10)) == 45

def test_large_then_freed():
    b = bytearray({PEAK_BYTES}); b[::4096] = b'x' * len(b[::4096])
    del b

def test_small_after():
    assert True
"""


def test_the_run_names_the_test_that_reached_the_highest_peak(tmp_path):
    """The per-test peak resets the kernel's high-water mark before each test, so the
    large test is named even though the memory is freed before the next one starts, and
    the session's peak still counts it."""
    proc = run_pytest_on(tmp_path, "test_peaks.py", TESTS_IN_PROCESS)
    session = re.search(r"peak memory: pytest ([\d.]+) GB", proc.stdout)
    ranked = re.findall(r"^\s+([\d.]+) GB  (\S+)$", proc.stdout, re.M)
    assert session and ranked, proc.stdout[-2000:]
    (top_peak, top_test), *rest = ranked
    assert top_test.endswith("test_large_then_freed"), ranked
    assert float(top_peak) >= PEAK_BYTES / 1e9
    assert all(float(peak) < float(top_peak) - 0.2 for peak, _ in rest), ranked
    assert float(session.group(1)) >= float(top_peak)

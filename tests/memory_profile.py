"""The suite's memory, measured and printed at the end of every run (never asserted):

* each test's peak resident memory of the pytest process, read by resetting the
  kernel's high-water mark (``VmHWM``) before the test — the ten highest are printed;
* the peak of the whole process tree — pytest and every child it starts (engines,
  servers, nested pytest runs, xdist workers) — as the sum of their proportional set
  sizes, sampled every ``TREE_INTERVAL`` seconds by a thread, with the test that was
  running at that moment;
* the cgroup's ``memory.peak`` where it is readable (it counts everything in the
  cgroup: on a shared machine, other work too).

A sample can miss a peak shorter than the interval; the pytest process's own peak is
exact (the kernel keeps it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from impl.process.tree_memory import TreePeak
from specgate.gates import free_unused_memory  # the gates' own, re-exported for the tests

TREE_INTERVAL = 0.2  # seconds between two samples of the process tree


def cgroup_peak_bytes() -> int | None:
    """The cgroup v2 ``memory.peak`` of this process's cgroup (everything in it), if readable."""
    try:
        (line,) = [x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::")]
        return int((Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.peak").read_text())
    except (OSError, ValueError):
        return None


def own_peak_bytes() -> int | None:
    """This process's own peak (``VmHWM``), which — unlike ``ru_maxrss`` on Linux — does
    not include the size of the process it was forked from before its exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_own_peak() -> bool:
    """Start the kernel's high-water mark (``VmHWM``) again from the current resident
    size (Linux >= 4.0: writing 5 to ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakMemoryProfile:
    """The pytest plugin: per-test peaks of the pytest process and the tree's peak."""

    SHOWN = 10

    def __init__(self, sample_tree: bool = True) -> None:
        self.before_tests = 0
        self.per_test: list[tuple[int, str]] = []
        self.resettable = True
        self.current = "(collection)"  # the test running (under xdist: the one started last)
        # an xdist worker's tree is in its controller's, which samples it
        sampled = sample_tree and Path(f"/proc/{os.getpid()}/statm").exists()
        self.tree = (
            TreePeak(os.getpid(), TREE_INTERVAL, where=lambda: self.current).start() if sampled else None
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if not self.per_test:
            self.before_tests = own_peak_bytes() or 0
        self.resettable = self.resettable and reset_own_peak()
        yield
        peak = own_peak_bytes()
        if self.resettable and peak is not None:
            self.per_test.append((peak, item.nodeid))

    def pytest_runtest_logstart(self, nodeid, location):
        """The test the tree's peak is attributed to (under xdist: the one started last)."""
        self.current = nodeid

    def pytest_sessionfinish(self, session):
        """A pytest-xdist worker hands its per-test peaks to the controller."""
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["specgate_peaks"] = [[peak, nodeid] for peak, nodeid in self.per_test]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """The controller: each worker's per-test peaks join the ranking (the tree sampler,
        running in the controller, already counts the workers as its children)."""
        self.per_test.extend(
            (peak, nodeid) for peak, nodeid in getattr(node, "workeroutput", {}).get("specgate_peaks", [])
        )

    def session_peak(self) -> int | None:
        if not (self.resettable and self.per_test):
            return own_peak_bytes()
        return max(self.before_tests, *(peak for peak, _ in self.per_test))

    def highest(self) -> list[tuple[int, str]]:
        return sorted(self.per_test, reverse=True)[: self.SHOWN]

    def lines(self) -> list[str]:
        """What the run prints at its end."""
        if self.tree is not None:
            self.tree.sample()
            self.tree.stop()
        own = self.session_peak() or 0
        line = f"peak memory: pytest {own / 1e9:.2f} GB"  # under xdist: the largest worker's
        if self.tree is not None:
            whole = max(self.tree.bytes, own)
            line += (
                f"; pytest and its children together {whole / 1e9:.2f} GB"
                f" (PSS, sampled every {self.tree.interval:g} s, during {self.tree.at})"
            )
        cgroup = cgroup_peak_bytes()
        if cgroup is not None:
            line += f"; cgroup memory.peak {cgroup / 1e9:.2f} GB"
        out = [line]
        if highest := self.highest():
            out.append(f"highest per-test peaks of the pytest process (top {len(highest)}):")
            out.extend(f"  {peak / 1e9:6.2f} GB  {nodeid}" for peak, nodeid in highest)
        return out


def release_forward_weights(engine: Any, model: Any) -> None:
    """``engine`` drops ``model``'s forward weights, and their memory goes back to the system
    (a test that runs two references' forwards runs them one after the other)."""
    engine.release_forward(model)
    free_unused_memory()

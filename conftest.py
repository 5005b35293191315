"""Top-level pytest configuration: the specgate plugin (options --impl, --model,
--stages, --live-references; the parity matrix), the hypothesis profiles and the
session's peak-memory line."""

import os
import resource
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["specgate.plugin"]

# CI's profile runs the property tests at full strength; `dev` is for quick local loops.
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _cgroup_peak_bytes() -> int | None:
    """The cgroup v2 ``memory.peak`` of this process's cgroup (everything in it), if readable."""
    try:
        (line,) = [x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::")]
        return int((Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.peak").read_text())
    except (OSError, ValueError):
        return None


def _own_peak_bytes() -> int | None:
    """This process's own peak (``VmHWM``), which — unlike ``ru_maxrss`` on Linux — does
    not include the size of the process it was forked from before its exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_own_peak() -> bool:
    """Start the kernel's high-water mark (``VmHWM``) again from the current resident
    size (Linux >= 4.0: writing 5 to ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakMemoryProfile:
    """Each test's peak resident memory of the pytest process, measured by resetting the
    kernel's high-water mark before the test and reading it after; the session's peak is
    the largest of them (and of what came before the first test: collection, imports).
    The ten tests that reached the highest peaks are printed at the end with the peak
    line, beside ``--durations``: what to look at when the suite's memory grows."""

    SHOWN = 10

    def __init__(self) -> None:
        self.before_tests = 0
        self.per_test: list[tuple[int, str]] = []
        self.resettable = True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if not self.per_test:
            self.before_tests = _own_peak_bytes() or 0
        self.resettable = self.resettable and _reset_own_peak()
        yield
        peak = _own_peak_bytes()
        if self.resettable and peak is not None:
            self.per_test.append((peak, item.nodeid))

    def session_peak(self) -> int | None:
        if not (self.resettable and self.per_test):
            return _own_peak_bytes()
        return max(self.before_tests, *(peak for peak, _ in self.per_test))

    def highest(self) -> list[tuple[int, str]]:
        return sorted(self.per_test, reverse=True)[: self.SHOWN]


def pytest_configure(config):
    config.pluginmanager.register(PeakMemoryProfile(), "specgate-peak-memory")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Measured, printed, not asserted: the peak resident memory of this pytest process and
    of its largest finished child (engines, servers, nested pytest runs), from
    ``getrusage``; and the cgroup's peak where there is one (it counts everything in the
    cgroup: on a shared machine, other work too)."""
    profile = config.pluginmanager.get_plugin("specgate-peak-memory")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = profile.session_peak() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale
    line = f"peak memory: pytest {own / 1e9:.2f} GB, largest child {child / 1e9:.2f} GB (max RSS)"
    # Linux carries a process's peak across exec: a child forked from a large process
    # starts its count at its parent's size, so the child figure is an upper bound.
    cgroup = _cgroup_peak_bytes()
    if cgroup is not None:
        line += f"; cgroup memory.peak {cgroup / 1e9:.2f} GB"
    terminalreporter.write_line(line)
    highest = profile.highest()
    if highest:
        terminalreporter.write_line(f"highest per-test peaks of the pytest process (top {len(highest)}):")
        for peak, nodeid in highest:
            terminalreporter.write_line(f"  {peak / 1e9:6.2f} GB  {nodeid}")


def _return_freed_memory_to_the_system() -> None:
    """glibc keeps freed heap pages mapped; ``malloc_trim(0)`` hands them back, so a large
    model dropped by one module does not stay resident under the next one."""
    import contextlib
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


@pytest.fixture(autouse=True, scope="module")
def _oracle_weights_live_one_module():
    """The oracle's float32 weights (~2 GB for the 0.5B model) are dropped after each test
    module: a module that ran the 0.5B last must not hold them through the modules after
    it (the logits references load the same model in transformers and llama.cpp)."""
    yield
    oracle = sys.modules.get("impl.oracle")
    if oracle is not None:
        oracle._forward_models.clear()
    import gc

    gc.collect()
    _return_freed_memory_to_the_system()

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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Measured, printed, not asserted: the peak resident memory of this pytest process and
    of its largest finished child (engines, servers, nested pytest runs), from
    ``getrusage``; and the cgroup's peak where there is one (it counts everything in the
    cgroup: on a shared machine, other work too)."""
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = _own_peak_bytes() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale
    line = f"peak memory: pytest {own / 1e9:.2f} GB, largest child {child / 1e9:.2f} GB (max RSS)"
    # Linux carries a process's peak across exec: a child forked from a large process
    # starts its count at its parent's size, so the child figure is an upper bound.
    cgroup = _cgroup_peak_bytes()
    if cgroup is not None:
        line += f"; cgroup memory.peak {cgroup / 1e9:.2f} GB"
    terminalreporter.write_line(line)


@pytest.fixture(autouse=True, scope="module")
def _oracle_weights_live_one_module():
    """The oracle's float32 weights (~2 GB for the 0.5B model) are dropped after each test
    module: a module that ran the 0.5B last must not hold them through the modules after
    it (the logits references load the same model in transformers and llama.cpp)."""
    yield
    oracle = sys.modules.get("impl.oracle")
    if oracle is not None:
        oracle._forward_models.clear()

"""Run a command and write the peak resident size of its process tree — the largest
``ru_maxrss`` of it and every descendant it waited for (pytest and the engines it
started) — as JSON to the file named first:

    python tests/engines/peak_rss.py OUT.json CMD [ARGS...]

The exit status is the command's. The wrapper itself stays small (~10 MB), so the
peak is the run's, measured by the kernel rather than sampled. ``own_peak_bytes`` is
the command's own process alone (the gate, not the engines it starts): its kernel
high-water mark (``VmHWM``), read every ``POLL`` seconds while it runs — the mark
only rises, so the last reading misses at most what the last ``POLL`` seconds added."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
from pathlib import Path

from impl.process import lifeline

POLL = 0.1


def high_water_mark(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def main() -> int:
    out, *cmd = sys.argv[1:]
    proc = lifeline.spawn(cmd)  # tied to us: killed if we are
    own = 0
    while proc.poll() is None:
        own = max(own, high_water_mark(proc.pid) or 0)
        with contextlib.suppress(subprocess.TimeoutExpired):  # still running: read the mark again
            proc.wait(timeout=POLL)
    status = proc.returncode
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    result = {"peak_bytes": peak, "own_peak_bytes": own, "status": status}
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())

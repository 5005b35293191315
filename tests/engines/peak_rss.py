"""Run a command and write the peak resident size of its process tree — the largest
``ru_maxrss`` of it and every descendant it waited for (pytest and the engines it
started) — as JSON to the file named first:

    python tests/engines/peak_rss.py OUT.json CMD [ARGS...]

The exit status is the command's. The wrapper itself stays small (~10 MB), so the
peak is the run's, measured by the kernel rather than sampled. ``own_peak_bytes`` is
the command's own process alone (the gate, not the engines it starts): its kernel
high-water mark (``VmHWM``), read every ``POLL`` seconds while it runs — the mark
only rises, so the last reading misses at most what the last ``POLL`` seconds added.

Resident is not committed: ``VmHWM`` counts a memory-mapped file's pages (the oracle's
dequantized weights, ``oracle.weights_store``) like the process's own. So the same
process is also sampled every ``POLL`` seconds for the parts, each its own peak:
``own_peak_anon_bytes`` (``RssAnon``: anonymous memory, what the process commits and
the kernel cannot drop), ``own_peak_file_bytes`` (``RssFile``: mapped file pages,
reclaimable page cache) and ``own_peak_pss_bytes`` (``Pss`` of ``smaps_rollup``: its
share of every page, shared ones divided among the processes mapping them). Sampled
peaks can miss a spike shorter than ``POLL``; the kernel's mark cannot."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
from pathlib import Path

from impl.process import lifeline

POLL = 0.1
STATUS_FIELDS = {
    "VmHWM": "own_peak_bytes",
    "RssAnon": "own_peak_anon_bytes",
    "RssFile": "own_peak_file_bytes",
}


def kib_fields(path: str, wanted: dict[str, str]) -> dict[str, int]:
    """The ``wanted`` ``Name:  N kB`` lines of a /proc file, in bytes, by their new names."""
    found: dict[str, int] = {}
    try:
        for line in Path(path).read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in wanted:
                found[wanted[name]] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found


def main() -> int:
    out, *cmd = sys.argv[1:]
    proc = lifeline.spawn(cmd)  # tied to us: killed if we are
    own = dict.fromkeys([*STATUS_FIELDS.values(), "own_peak_pss_bytes"], 0)
    while proc.poll() is None:
        now = kib_fields(f"/proc/{proc.pid}/status", STATUS_FIELDS)
        now |= kib_fields(f"/proc/{proc.pid}/smaps_rollup", {"Pss": "own_peak_pss_bytes"})
        for key, value in now.items():
            own[key] = max(own[key], value)
        with contextlib.suppress(subprocess.TimeoutExpired):  # still running: read the marks again
            proc.wait(timeout=POLL)
    status = proc.returncode
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    result = {"peak_bytes": peak, **own, "status": status}
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Run a command and write the peak resident size of its process tree — the largest
``ru_maxrss`` of it and every descendant it waited for (pytest and the engines it
started) — as JSON to the file named first:

    python tests/engines/peak_rss.py OUT.json CMD [ARGS...]

The exit status is the command's. The wrapper itself stays small (~10 MB), so the
peak is the run's, measured by the kernel rather than sampled."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from impl.process import lifeline


def main() -> int:
    out, *cmd = sys.argv[1:]
    status = lifeline.run(cmd).returncode  # tied to us: killed if we are
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    Path(out).write_text(json.dumps({"peak_bytes": peak, "status": status}), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())

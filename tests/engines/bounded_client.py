"""Run adapter calls in a process of their own and report what they cost it.

    python tests/engines/bounded_client.py '<json plan>'

The plan is ``{"impl": "cmd:..." | "http:...", "calls": [["encode", "text"] | ["logits", n_ids] |
["probe"], ...]}``.
Prints one JSON object: per call its outcome (``ok`` with the value, or ``error`` /
``unsupported`` with the message, cut to 64 kB with its full length given), the
process's resident-memory high-water mark (``VmHWM``) before the first call and
at the end, in bytes, and the seconds the calls took. The adapter runs here, not
in pytest, so the high-water mark is the adapter's alone: what pytest would hold.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from impl.protocol import EngineError, ModelRef, Unsupported
from impl.registry import resolve

MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)
MESSAGE_CUT = 64 * 1024


def high_water_mark() -> int:
    """Peak resident set size of this process so far, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def call(engine: Any, name: str, *args: Any) -> Any:
    if name == "probe":
        return sorted(engine.capabilities)
    if name == "encode":
        return engine.encode(MODEL, args[0], parse_special=False)
    if name == "logits":
        return engine.logits(MODEL, list(range(args[0]))).shape
    raise ValueError(f"unknown call {name!r}")


def outcome(engine: Any, name: str, *args: Any) -> dict[str, Any]:
    try:
        return {"outcome": "ok", "value": call(engine, name, *args)}
    except (EngineError, Unsupported) as exc:
        message = str(exc)
        kind = "unsupported" if isinstance(exc, Unsupported) else "error"
        return {"outcome": kind, "message": message[:MESSAGE_CUT], "message_length": len(message)}


def main() -> int:
    plan = json.loads(sys.argv[1])
    before = high_water_mark()
    t0 = time.monotonic()
    engine = resolve(plan["impl"])
    results = [outcome(engine, *c) for c in plan["calls"]]
    seconds = time.monotonic() - t0
    starts = getattr(engine, "starts", None)
    engine.close()
    report = {"results": results, "hwm_before": before, "hwm_after": high_water_mark(), "seconds": seconds}
    print(json.dumps({**report, "starts": starts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

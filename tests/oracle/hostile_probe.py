"""Run hostile templates one by one, each in a forked child, and measure what refusing costs.

    python -m tests.oracle.hostile_probe corpus/templates/hostile/*.jinja

prints one JSON object per template: ``outcome`` (``refused``, ``rendered``,
``raised`` — an exception other than ``TemplateRefusal`` —, ``hung`` or
``crashed``), the refusal's ``message`` and ``line``, ``seconds`` (wall time of
compile + canary render, what ``ChatTemplate(source)`` does when a model loads;
``cpu_seconds`` the CPU time of the same)
and ``peak_mb`` (the child's peak resident memory above its resident memory
when the template arrived).

Why a fork per template: a C-level allocation or a hang cannot be measured or
stopped from inside the process that makes it. The parent imports the renderer
once; each child starts from that warm state, resets its peak-RSS mark
(``/proc/self/clear_refs``), runs one template, and reads ``VmHWM`` — the kernel's
high-water mark of its resident memory, which sees C allocations that
``tracemalloc`` does not. A child still running after ``--timeout`` seconds is
killed and reported as hung.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from oracle import template as tpl
from oracle.template_sandbox import DEFAULT_LIMITS, Limits


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    """Make VmHWM equal the current VmRSS (Linux >= 4.0), so the peak is this case's."""
    Path("/proc/self/clear_refs").write_text("5")


def run_one(source: str, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Load ``source`` as a model's template; what happened, how long, how much memory."""
    _reset_peak()
    rss_before = _status_kb("VmRSS")
    start, cpu_start = time.perf_counter(), time.process_time()
    result: dict[str, Any]
    try:
        tpl.ChatTemplate(source, limits=limits)
        result = {"outcome": "rendered"}
    except tpl.TemplateRefusal as exc:
        result = {"outcome": "refused", "message": str(exc), "line": exc.line, "construct": exc.construct}
    except BaseException as exc:
        result = {"outcome": "raised", "message": f"{type(exc).__name__}: {str(exc)[:300]}"}
    result["seconds"] = time.perf_counter() - start
    result["cpu_seconds"] = time.process_time() - cpu_start
    result["peak_mb"] = (_status_kb("VmHWM") - rss_before) / 1024
    return result


def probe(
    source: str, timeout: float, memory_cap_mb: int = 0, limits: Limits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """``run_one(source)`` in a forked child, killed after ``timeout`` seconds; with
    ``memory_cap_mb`` its address space is capped (a runaway then raises ``MemoryError``
    instead of taking the machine's memory)."""
    read_end, write_end = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: run, report, leave without running the parent's cleanup
        os.close(read_end)
        if memory_cap_mb:
            cap = memory_cap_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            payload = json.dumps(run_one(source, limits)).encode()
        except BaseException as exc:
            payload = json.dumps({"outcome": "raised", "message": repr(exc)[:300]}).encode()
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            remaining = timeout - (time.perf_counter() - start)
            ready, _, _ = select.select([pipe], [], [], max(remaining, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"outcome": "hung", "seconds": timeout, "peak_mb": None}
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return {
            "outcome": "crashed",
            "message": f"child exit status {status}",
            "seconds": None,
            "peak_mb": None,
        }
    return json.loads(b"".join(chunks))


#: What a refusal by each render budget says (``Budget`` in oracle/template_bounds.py).
RENDER_BUDGETS = (
    "render step budget exceeded",
    "render time budget exceeded",
    "render memory budget exceeded",
)


def names_expected(message: str, expect: str) -> bool:
    """Whether a refusal ``message`` names what the template's ``expect`` line asks for."""
    return expect in message


def refused_as_expected(message: str, expect: str) -> bool:
    """Whether a refusal ``message`` is within a hostile template's bounds: it names what
    the ``expect`` line asks for, or a render budget stopped the template first. The time
    budget is wall-clock, so which budget fires first depends on the machine's speed and
    load (CI saw ``50_many_big_strings`` and ``17_exponential_macro`` stopped by the
    clock); a refusal by any of them is a refusal within the bounds."""
    return names_expected(message, expect) or any(budget in message for budget in RENDER_BUDGETS)


def _warm_up() -> None:
    """Import and build everything a first template pays for, so children do not count it."""
    tpl.ChatTemplate("{% for m in messages %}{{ m.role ~ ':' ~ m.content|trim }}{% endfor %}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("templates", nargs="+", type=Path)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a child is killed")
    parser.add_argument("--memory-cap-mb", type=int, default=0, help="address-space cap per child (0: none)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=0,
        help="the render time budget (0: the default; 3600 measures the other budgets alone)",
    )
    args = parser.parse_args(argv)
    limits = (
        dataclasses.replace(DEFAULT_LIMITS, max_seconds=args.max_seconds)
        if args.max_seconds
        else DEFAULT_LIMITS
    )
    _warm_up()
    for path in args.templates:
        result = probe(path.read_text(encoding="utf-8"), args.timeout, args.memory_cap_mb, limits)
        print(json.dumps({"name": path.stem, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

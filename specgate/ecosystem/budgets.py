"""Each engine's time budget, from what it measurably costs and how busy the machine is.

An engine folder's ``engine.toml`` may say ``cost = S``: the seconds its full-table run
took on a quiet 2-core machine. Its budget is that cost times ``MARGIN`` (never below
``FLOOR``; ``DEFAULT_COST`` when unknown), times the machine's load factor measured just
before it runs: the 1-minute load average per core, at least 1. A machine running four
times the work of its cores gives every engine four times the time, so a row reads
*timeout* for an engine that hangs, not for one that shared a busy machine.

``--budget S`` fixes every engine's budget instead; ``--total-budget S`` caps the whole
run (each engine still to run then gets at most an even share of what is left).
"""

from __future__ import annotations

import os

from specgate.ecosystem.spec import EngineSpec

#: A measured cost is multiplied by this much (run-to-run spread, a cold page cache).
MARGIN = 3.0
#: No engine gets less (interpreter start, a model's first load, the shrinker).
FLOOR = 120.0
#: The cost of an engine that does not state one.
DEFAULT_COST = 300.0
#: The load factor never exceeds this (a runaway load average must not mean "forever").
MAX_FACTOR = 8.0


def load_factor(load: float | None = None, cores: int | None = None) -> float:
    """The 1-minute load average per core, between 1 and ``MAX_FACTOR``."""
    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    return min(max(1.0, load / cores), MAX_FACTOR)


def engine_budget(spec: EngineSpec, factor: float, fixed: float | None = None) -> float:
    """``spec``'s budget in seconds: ``fixed`` when given, else its scaled measured cost."""
    if fixed is not None:
        return fixed
    return round(max(FLOOR, (spec.cost or DEFAULT_COST) * MARGIN) * factor, 1)


def explain(spec: EngineSpec, factor: float, fixed: float | None) -> str:
    """How the budget was reached, for the table."""
    if fixed is not None:
        return "fixed by --budget"
    cost = f"measured cost {spec.cost:g} s" if spec.cost else f"no measured cost (default {DEFAULT_COST:g} s)"
    return f"{cost} × {MARGIN:g} (at least {FLOOR:g} s) × load factor {factor:.2f}"

"""``--shard I/N``: one of N deterministic, cost-balanced parts of a run's gate cases.

An engine's CI spreads a slow parity run over N jobs of its own CI's job matrix
(README, "In your engine's CI"); ``specgate report merge`` joins their JSON reports.

* **Groups, not cases.** Gate cases that share one engine computation — the two
  conformance classes of a logits or generate case read the same answer — form one
  group and land on one shard, so every computation still happens once.
* **Balanced by cost, not by count.** A group costs the seconds measured per case of
  its stage on its model, running the oracle (``corpus/shard_costs.json``; a stage or
  model the table lacks costs the stage's largest, else the table's default). Groups
  are dealt longest first, each to the least loaded shard (ties: lower index, then
  group name), which depends only on the collected cases: every job computes the
  same split without talking to the others.
* Tests that are not gates run in shard 1 only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT

COSTS = DATA_ROOT / "corpus" / "shard_costs.json"


class ShardError(ValueError):
    """A bad ``--shard`` value or cost table (reported as one usage line)."""


def chosen_shard(raw: str) -> tuple[int, int] | None:
    """``--shard I/N`` as ``(I, N)`` (None without it); a bad value is one usage line."""
    import pytest

    try:
        return parse_shard(raw) if raw else None
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` → ``(2, 3)``: shard I of N, 1 ≤ I ≤ N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ShardError(f"--shard {text!r}: expected I/N, e.g. 1/3")
    index, total = int(match[1]), int(match[2])
    if not 1 <= index <= total:
        raise ShardError(f"--shard {text!r}: I must be between 1 and N (got {index} of {total})")
    return index, total


def load_costs(path: Path = COSTS) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        float(table["default_seconds"])
        assert isinstance(table["seconds_per_case"], dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise ShardError(f"{path}: not a shard cost table ({type(exc).__name__}: {exc})") from None
    return table


MIN_SECONDS = 0.001  # a case never costs nothing: pytest's own work per test


def case_cost(costs: dict[str, Any], stage: str, model: str) -> float:
    """Measured seconds of one case of ``stage`` (no conformance class) on ``model``."""
    per_model = costs["seconds_per_case"].get(stage, {})
    if model in per_model:
        return max(float(per_model[model]), MIN_SECONDS)
    return max(float(max(per_model.values(), default=costs["default_seconds"])), MIN_SECONDS)


def deal(group_costs: dict[str, float], total: int) -> dict[str, int]:
    """Longest processing time first: each group (largest first) to the least loaded
    shard. Returns group → shard index (1-based)."""
    loads = [0.0] * total
    shard_of: dict[str, int] = {}
    for group in sorted(group_costs, key=lambda g: (-group_costs[g], g)):
        lightest = min(range(total), key=lambda i: (loads[i], i))
        loads[lightest] += group_costs[group]
        shard_of[group] = lightest + 1
    return shard_of


def gate_group(stage: str, model: str, case: str) -> str:
    """The group of a gate case: cases sharing (stage, model, case) share the engine's answer."""
    return f"{stage.split('/')[0]}|{model}|{case}"


def split_cases(
    cases: Iterable[tuple[str, str, str]], index: int, total: int, costs: dict[str, Any]
) -> set[str]:
    """The groups of ``cases`` ((stage, model, case) triples) that shard ``index`` of ``total`` runs."""
    group_costs: dict[str, float] = {}
    for stage, model, case in cases:
        group = gate_group(stage, model, case)
        group_costs[group] = max(group_costs.get(group, 0.0), case_cost(costs, stage.split("/")[0], model))
    return {g for g, shard in deal(group_costs, total).items() if shard == index}

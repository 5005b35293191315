"""Measure ``corpus/shard_costs.json``: seconds per gate case, per stage × model, on the
oracle — the cost table ``--shard I/N`` balances shards by (``specgate/run/shard.py``).

Run the gates once with a JUnit XML beside the parity report, then:

    pytest specgate/gates -p no:cacheprovider --report-dir /tmp/costs --junitxml /tmp/costs/run.xml
    python benchmarks/shard_costs.py /tmp/costs/parity-oracle-*.json /tmp/costs/run.xml

A case's cost is the call time of all its tests together (the two conformance classes
of a logits or generate case share one computation: the first pays for it); a stage ×
model entry is the mean over its cases, to 0.1 ms (thousands of tokenizer cases take a
millisecond or two each: together they weigh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specgate.run.shard import COSTS, gate_group


def junit_seconds(xml_path: Path) -> dict[str, float]:
    """nodeid → seconds, from a JUnit XML (classname ``specgate.gates.test_x`` + name)."""
    out = {}
    for case in ET.parse(xml_path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        out[f"{module}::{case.get('name')}"] = float(case.get("time", 0.0))
    return out


def cost_table(report: dict, seconds: dict[str, float]) -> dict[str, dict[str, float]]:
    groups: dict[str, float] = defaultdict(float)
    where: dict[str, tuple[str, str]] = {}
    for case in report["cases"]:
        if case["nodeid"] not in seconds:
            continue
        stage = case["stage"].split("/")[0]
        params = case["nodeid"].split("[", 1)[-1].removesuffix("]")
        group = gate_group(stage, case["model"], params.removesuffix("-exact").removesuffix("-quantized"))
        groups[group] += seconds[case["nodeid"]]
        where[group] = (stage, case["model"])
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for group, secs in groups.items():
        stage, model = where[group]
        per[stage][model].append(secs)
    return {
        s: {m: round(statistics.mean(v), 4) for m, v in sorted(ms.items())} for s, ms in sorted(per.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path, help="the run's parity JSON report")
    parser.add_argument("junit", type=Path, help="the run's JUnit XML")
    parser.add_argument("--out", type=Path, default=COSTS)
    args = parser.parse_args()
    table = cost_table(json.loads(args.report.read_text(encoding="utf-8")), junit_seconds(args.junit))
    payload = {
        "about": "seconds per gate case on the oracle, per stage and model (benchmarks/shard_costs.py)",
        "default_seconds": 1.0,
        "seconds_per_case": table,
    }
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {sum(len(v) for v in table.values())} stage × model entries")


if __name__ == "__main__":
    main()

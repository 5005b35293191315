"""The compliance report: the stage × model matrix, as text, Markdown and JSON."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from specgate.gate import OUTCOMES


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "impl"


def tally(records: list[Any]) -> dict[tuple[str, str], Counter]:
    table: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in records:
        table[(r.stage, r.model)][r.outcome] += 1
    return dict(sorted(table.items()))


def metrics_summary(records: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Worst value per metric per (stage, model): max for errors/divergences, min for agreement."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for r in records:
        for name, value in r.metrics.items():
            if not isinstance(value, (int, float)):
                continue
            cur = out[(r.stage, r.model)].get(name)
            worse = min if ("agree" in name or "top1" in name) else max
            out[(r.stage, r.model)][name] = value if cur is None else worse(cur, value)
    return dict(out)


def matrix_text(records: list[Any]) -> str:
    table = tally(records)
    mets = metrics_summary(records)
    head = f"{'stage':<10} {'model':<36} " + " ".join(f"{o:>8}" for o in ("pass", "fail", "n/a", "disagree", "error"))
    lines = [head, "-" * len(head)]
    for (stage, model), counts in table.items():
        row = f"{stage:<10} {model:<36} " + " ".join(f"{counts.get(o, 0):>8}" for o in OUTCOMES)
        if (stage, model) in mets:
            row += "  " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(mets[(stage, model)].items()))
        lines.append(row)
    return "\n".join(lines)


def write_reports(results: Any, report_dir: str | Path) -> list[Path]:
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"parity-{_safe(results.impl)}"
    table = tally(results.records)
    mets = metrics_summary(results.records)
    payload = {
        "impl": results.impl,
        "matrix": [
            {"stage": s, "model": m, **{o: c.get(o, 0) for o in OUTCOMES}, "metrics": mets.get((s, m), {})}
            for (s, m), c in table.items()
        ],
        "cases": [r.__dict__ for r in results.records],
    }
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str), encoding="utf-8")

    md = [f"# specgate parity report — `{results.impl}`", "", "| stage | model | " + " | ".join(OUTCOMES) + " | metrics |",
          "|---|---|" + "---:|" * len(OUTCOMES) + "---|"]
    for (s, m), c in table.items():
        metric = ", ".join(f"{k}={v:.4g}" for k, v in sorted(mets.get((s, m), {}).items()))
        md.append(f"| {s} | {m} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES) + f" | {metric} |")
    problems = [r for r in results.records if r.outcome in ("fail", "error", "reference-disagreement")]
    if problems:
        md += ["", "## Findings", ""]
        for r in problems:
            md += [f"### {r.outcome}: {r.stage} · {r.model} · `{r.nodeid}`", "", "```", r.message.strip()[:4000], "```", ""]
    md_path = stem.with_suffix(".md")
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return [md_path, json_path]

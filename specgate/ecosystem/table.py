"""The whole table: every engine folder (or the ``--engines`` subset) installed, its
models' tokenizer files exported, each engine gated within its budget (``budgets``), and
the reports written (``write_table``): ``reports/ecosystem.{md,html,json}`` and the site
``reports/ecosystem-site/`` for the full table, ``reports/ecosystem-<a>+<b>.{md,html,json}``
and ``-site/`` for a subset, which never stands in for the full table (``publish`` refuses it)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from impl.process.tree_memory import TreePeak
from specgate.ecosystem import budgets
from specgate.ecosystem.gating import EngineRun, run_engine
from specgate.ecosystem.install import install
from specgate.ecosystem.results import Table, machine
from specgate.ecosystem.spec import ECOSYSTEM_DIR, EcosystemError, EngineSpec, discover
from specgate.safe_io import files
from specgate.supply.models import PROJECT_ROOT


def export_tokenizers(model_ids: set[str], export_dir: Path) -> dict[str, str]:
    """``specgate models export ID DIR/ID`` for each model; returns the failures by model."""
    from specgate.supply import models as model_cache
    from specgate.supply.export import export

    problems = {}
    for model_id in sorted(model_ids):
        try:
            export(model_cache.model_ref(model_id).gguf, export_dir / model_id)
        except Exception as exc:  # one model's export failing is reported, not fatal
            problems[model_id] = f"{type(exc).__name__}: {exc}"
    return problems


def run_all(
    root: Path = ECOSYSTEM_DIR,
    out_dir: Path = PROJECT_ROOT / "reports",
    *,
    engines: list[str] | None = None,
    budget: float | None = None,
    total_budget: float | None = None,
    pip_args: list[str] = (),  # type: ignore[assignment]
    extra: list[str] = (),  # type: ignore[assignment]
) -> Table:
    """Install and gate every engine under ``root`` (or those named in ``engines``); write
    the table; return it. ``budget``: every engine's seconds (None: ``budgets``, from its
    measured cost and the machine's load); ``total_budget``: the whole run's cap (None: none)."""
    start = time.monotonic()
    # The memory the run takes: this process and everything it starts (installs, servers,
    # gate runs, engines, confirm scripts), sampled as the suite samples its own.
    whole = TreePeak(os.getpid()).start()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    before = machine()
    specs, problems = [], []
    for folder in discover(root):
        if engines and folder.name not in engines:
            continue
        try:
            specs.append(EngineSpec.load(folder))
        except EcosystemError as exc:
            problems.append(str(exc))
    if engines and (unknown := sorted(set(engines) - {s.key for s in specs})):
        problems.append(f"no usable engine folder named {', '.join(unknown)} under {shown(root)}")
    runs_dir = out_dir / "ecosystem"
    export_dir = runs_dir / "export"
    shutil.rmtree(export_dir, ignore_errors=True)
    export_dir.mkdir(parents=True)
    installs = {spec.key: install(spec, pip_args) for spec in specs}
    wanted = {m for s in specs if installs[s.key].status != "unavailable" for m in s.models}
    problems += [
        f"tokenizer export of {m} failed: {why}" for m, why in export_tokenizers(wanted, export_dir).items()
    ]
    deadline = None if total_budget is None else start + total_budget
    rows = []
    to_run = [s for s in specs if installs[s.key].status != "unavailable"]
    for spec in specs:
        factor = budgets.load_factor()
        allowed = budgets.engine_budget(spec, factor, budget)
        note = budgets.explain(spec, factor, budget)
        if deadline is not None:
            left = deadline - time.monotonic()
            # Each engine still to run gets at most an even share of what is left, so a slow
            # one early in the order cannot starve the rest; cheap engines leave more for later.
            share = left / max(len(to_run), 1)
            if share < allowed:
                allowed, note = (
                    max(share, 0.0),
                    f"an even share of what was left of --total-budget {total_budget:g} s",
                )
            if left <= 1 and installs[spec.key].status != "unavailable":
                row = EngineRun(
                    spec.key, spec.name, spec.package, spec.version, spec.installer, installs[spec.key]
                )
                row.status, row.message = (
                    "timeout",
                    f"not started: the total budget of {total_budget:g} s was spent",
                )
                rows.append(row)
                continue
        if spec in to_run:
            to_run.remove(spec)
        with TreePeak(os.getpid()) as peak:
            row = run_engine(
                spec,
                installs[spec.key],
                runs_dir,
                allowed,
                export_dir=export_dir,
                extra=extra,
                base=out_dir.parent,
            )
        row.budget_note, row.peak_bytes = note, peak.bytes
        rows.append(row)
        print(
            f"specgate ecosystem: {spec.key}: {row.status} in {row.seconds} s of {row.budget:g} s", flush=True
        )
    table = Table(
        rows,
        started,
        round(time.monotonic() - start, 1),
        before,
        machine(),
        problems,
        engines=engines,
        # two samplers each may miss the other's highest moment: the higher of them
        peak_bytes=max([whole.stop(), *(r.peak_bytes for r in rows)]),
    )
    write_table(table, out_dir)
    return table


def shown(path: Path) -> str:
    """``path`` as the table may name it: relative to the project when inside it."""
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT.resolve()))
    except ValueError:
        return str(path)


def write_table(table: Table, out_dir: Path) -> list[Path]:
    from specgate.ecosystem.markdown import markdown
    from specgate.ecosystem.page import html
    from specgate.ecosystem.site import site_dir, write_site

    out_dir.mkdir(parents=True, exist_ok=True)
    md, page, data = (out_dir / f"{table.stem}{suffix}" for suffix in (".md", ".html", ".json"))
    files.write_text(md, markdown(table))
    files.write_text(page, html(table))
    summary = {
        **asdict(table),
        "rows": [{**asdict(r), "reports": None, "counts": r.counts()} for r in table.rows],
    }
    files.write_text(data, json.dumps(summary, indent=1, default=str))
    return [md, page, data, write_site(table, site_dir(table, out_dir))]


def publish(table: Table, out_dir: Path, target: Path) -> str:
    """Copy the full table's Markdown to ``target`` (ECOSYSTEM.md); a subset never is.
    Returns what happened, in one line."""
    written = out_dir / f"{table.stem}.md"
    if table.engines is not None:
        return (
            f"{written} holds the engines {', '.join(sorted(table.engines))} only; "
            f"{target.name} is left as it was (it is written only from the full table)"
        )
    shutil.copyfile(written, target)
    return f"{target.name} written from {written} (commit it)"

"""Usage errors: one line (``pytest.UsageError``, exit status 4) before anything runs —
never hundreds of per-case errors blamed on the engine."""

from __future__ import annotations

import pytest

from impl.registry import UnknownImpl, check
from specgate.run import selection
from specgate.run.selection import selected_models, selected_stages
from specgate.run.session import SESSION
from specgate.stages import CLASSED_STAGES, GATE_STAGES, known_rows
from specgate.supply import models as model_cache
from specgate.upkeep import snapshots


def check_usage(config: pytest.Config) -> None:
    """Stop the run with one line (``pytest.UsageError``, exit status 4) on an unknown
    stage, an unusable ``--impl`` or ``--model``, or a snapshot file that is not one."""
    from pathlib import Path

    from specgate.safe_io import files

    report_dir = Path(config.getoption("--report-dir"))
    if (why := files.writable_dir(report_dir)) is not None:  # before any case runs, not after all of them
        raise pytest.UsageError(f"--report-dir {report_dir}: {why}")
    stages = selected_stages(config)
    if stages is not None:
        unknown = sorted(stages - known_rows())
        classed = f"{', '.join(CLASSED_STAGES[:-1])} and {CLASSED_STAGES[-1]}"
        if unknown:
            raise pytest.UsageError(
                f"--stages: unknown stage(s) {', '.join(unknown)}; known: {', '.join(GATE_STAGES)} "
                f"({classed} also as <stage>/exact or <stage>/quantized)"
            )
    try:
        check(config.getoption("--impl"))
    except UnknownImpl as exc:
        raise pytest.UsageError(str(exc)) from None
    sample = [m.strip() for m in config.getoption("--reference-models").split(",") if m.strip()]
    if unknown_ids := [m for m in sample if not model_cache.is_known_id(m)]:
        raise pytest.UsageError(
            f"--reference-models: unknown model(s) {', '.join(unknown_ids)} (specgate models list)"
        )
    session = config.stash[SESSION]
    explicit = config.getoption("--model")
    chosen, missing = (explicit, []) if explicit else selection.split_cached(selected_models(config))
    for spec in chosen:  # the cache's own models are verified too; the missing ones are one error
        try:
            ref = session.model(spec)
        except model_cache.ModelError as exc:
            raise pytest.UsageError(f"--model {spec!r}: {exc}" if explicit else str(exc)) from None
        if ref.role == "user":
            from oracle.gguf import GGUFError, open_gguf

            try:
                open_gguf(ref.gguf)
            except GGUFError as exc:
                raise pytest.UsageError(f"--model {spec!r}: not a readable GGUF file: {exc}") from None
    snapshots.check_files(session.snapshot_root, selected_models(config))  # UsageError
    if missing:
        raise pytest.UsageError(selection.missing_line(missing, session.snapshot_root))


def check_models_gated(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An explicitly chosen model that no selected gate case covers gates nothing:
    say so (and which snapshots it has) instead of passing an empty run."""
    gate_items = [i for i in items if i.get_closest_marker("gate") is not None]
    if not gate_items or not config.getoption("--model"):
        return
    covered = {str(i.callspec.params.get("model_id")) for i in gate_items if hasattr(i, "callspec")}
    session = config.stash[SESSION]
    root = session.snapshot_root
    for spec in config.getoption("--model"):
        ref = session.model(spec)
        if ref.id in covered or spec in covered:
            continue
        stages = snapshots.stages_of(ref.id, root)
        if not stages:
            record = f"nox -s snapshots -- --model {spec} --snapshot-dir DIR"
            raise pytest.UsageError(
                f"--model {spec!r}: no reference snapshots for {ref.id!r} under {root}, so nothing can be "
                f"gated; record them from the live references with `{record}`, then gate with "
                f"`nox -s parity -- --model {spec} --snapshot-dir DIR`"
            )
        raise pytest.UsageError(
            f"--model {spec!r}: no selected gate case covers it (its snapshots: {', '.join(stages)}; "
            f"--stages {config.getoption('--stages') or '(all)'})"
        )

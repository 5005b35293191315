"""The same cases on every machine: the committed snapshots define what a run gates, whatever
the cache held before. A model the snapshots need and the cache lacks is one setup error
naming it and the command that provides it (exit 4) — never a green run on a subset."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.outcomes.verdict import GateRecord
from specgate.plugin import SpecgateSession, model_missing
from specgate.reports.parity_report import write_reports
from specgate.supply import models as model_cache
from specgate.supply import tiny_specs
from specgate.upkeep import snapshots

ROOT = Path(__file__).resolve().parents[2]


def gate_run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "specgate/gates",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *args,
    ]
    env = {**os.environ, "SPECGATE_CACHE": str(cache)}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def models_with_snapshots() -> list[str]:
    """Read from the snapshot tree itself: every model folder holding a stage snapshot."""
    return sorted(
        p.name
        for p in snapshots.SNAPSHOT_ROOT.iterdir()
        if p.is_dir()
        and any(p.glob("*.json"))
        and (p.name.startswith("tiny-") or p.name in model_cache.load_manifest())
    )


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]


def test_an_empty_cache_is_one_setup_error_naming_every_model_and_the_commands(tmp_path: Path) -> None:
    """Today's main ran 72 construct-template cases green here and exited 0."""
    proc = gate_run(tmp_path / "empty-cache", "-q")
    errors = error_lines(proc)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(errors) == 1, errors or proc.stdout[-2000:]
    named = set(re.findall(r"[\w.\-]+", errors[0]))
    expected = models_with_snapshots()
    assert len(expected) > 20 and set(expected) <= named, sorted(set(expected) - named)
    assert "specgate models fetch" in errors[0] and "specgate models tiny" in errors[0]
    assert "passed" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def linked_cache(folder: Path, ids: list[str]) -> Path:
    """A cache holding ``ids``, hard-linked from the real cache (their files, sidecars, stamps)."""
    for model_id in ids:
        source = model_cache.model_dir(model_id)
        target = folder / "models" / model_id
        target.mkdir(parents=True)
        for f in source.iterdir():
            if f.is_file():
                os.link(f, target / f.name)
    return folder


def collected(proc: subprocess.CompletedProcess[str]) -> int:
    match = re.search(r"(\d+) tests? collected", proc.stdout)
    assert proc.returncode == 0 and match, proc.stdout[-2000:] + proc.stderr[-2000:]
    return int(match.group(1))


@pytest.mark.slow
def test_the_case_count_does_not_depend_on_what_was_cached(tmp_path: Path) -> None:
    """A fresh machine after ``specgate models fetch`` (no tiny models) used to gate 3,819 cases
    and one where another command had made the tiny models 4,399, both exiting 0."""
    real = [m for m in models_with_snapshots() if tiny_specs.parse_id(m) is None]
    tiny = [m for m in models_with_snapshots() if tiny_specs.parse_id(m) is not None]
    cached = {*model_cache.cached_models(), *model_cache.cached_tiny_models()}
    if missing := [m for m in real + tiny if m not in cached]:
        model_missing(f"{missing} (run: specgate models fetch && specgate models tiny)")
    full = linked_cache(tmp_path / "full", real + tiny)
    fuller = linked_cache(
        tmp_path / "fuller", [*real, *tiny, *(m for m in sorted(cached) if m not in real + tiny)]
    )
    partial = linked_cache(tmp_path / "partial", real)

    n_full = collected(gate_run(full, "--collect-only", "-q"))
    assert n_full == collected(gate_run(fuller, "--collect-only", "-q"))
    proc = gate_run(partial, "--collect-only", "-q")
    assert proc.returncode == 4, f"a cache without the tiny models collected: {proc.stdout[-500:]}"
    (error,) = error_lines(proc)
    assert all(m in error for m in tiny) and "specgate models tiny" in error
    # the tiny models carry cases: without them the count would have dropped
    assert n_full > collected(gate_run(partial, "--collect-only", "-q", "--models", ",".join(real)))


def test_the_parity_session_provides_the_tiny_models_itself() -> None:
    """``nox -s parity`` fetches the real models and writes the tiny ones in its own session."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    parity = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parity")
    calls = [
        c for c in ast.walk(parity) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "fetch_models"
    ]
    assert calls, "the parity session fetches no models"
    tiny = {kw.arg: ast.literal_eval(kw.value) for c in calls for kw in c.keywords}.get("tiny")
    assert tiny is True, "the parity session does not make the tiny models (fetch_models(session, tiny=True))"


def test_reports_list_the_models_gated(tmp_path: Path) -> None:
    records = [
        GateRecord("encode", "qwen3-vocab", "pass", "a"),
        GateRecord("logits/exact", "tiny-qwen2-q4_k", "fail", "b"),
        GateRecord("encode", "qwen3-vocab", "pass", "c"),
    ]
    md, js, *_ = write_reports(SpecgateSession(impl="oracle", records=records), tmp_path)
    assert json.loads(js.read_text(encoding="utf-8"))["models"] == ["qwen3-vocab", "tiny-qwen2-q4_k"]
    shown = re.sub(r"\\(.)", r"\1", md.read_text(encoding="utf-8"))  # as Markdown shows it (escaped text)
    assert "Models gated (2): qwen3-vocab, tiny-qwen2-q4_k" in shown

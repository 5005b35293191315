"""Evidence that the gates catch defects in engines nobody here wrote.

Each engine in ``tests/engines/mutants/`` is the oracle with one planted defect,
served over PROTOCOL.md by its own script and gated through ``--impl 'cmd:...'``
as a real external process, exactly as an engine author's engine would be. Each
must fail exactly the stage its defect lives in — the other stages of the run
pass — and the first-divergence message must show the defect's symptom.

The report must also triage it: the defect is one root-cause group per failing
stage (row), and where the stage can be replayed on a new input, the group's
reproducer is shrunk to a few characters, messages or tokens, within the
shrinking budget; ``specgate repro`` replays it (exit 1 on the mutant, 0 on the oracle).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from impl.process import lifeline
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity, script_impl

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants")
#: Shrinking budgets out of reach (ddmin converges on these small cases in seconds on a quiet
#: machine): the reproducer's size, not which of load and budget came first, is what is judged.
GROUP_BUDGET = 600.0  # seconds of shrinking per group (--shrink-group-budget)
RUN_BUDGET = 1800.0  # seconds of shrinking per run (--shrink-budget)


@dataclass(frozen=True)
class Mutant:
    script: str
    stages: tuple[str, ...]  # stages run: the defect's own and unrelated ones that must still pass
    models: tuple[str, ...]
    fails: frozenset[str]  # exactly the stages that must fail
    symptoms: dict[str, str]  # stage -> regex the first failing case's message must match
    extra: tuple[str, ...] = ()  # more pytest arguments (to keep the run short)
    # failing stage row -> the largest acceptable reproducer (characters, messages + characters, tokens);
    # rows not listed cannot be replayed on a new input (sample, generate): one group, no reproducer.
    repro_size: dict[str, int] = field(default_factory=dict)


CASES = [
    Mutant(
        "tokenizer_no_lookahead",
        stages=("metadata", "split", "encode", "decode"),
        models=("qwen2.5-coder-0.5b-instruct",),
        fails=frozenset({"split", "encode"}),
        symptoms={
            # The reference leaves the run's last space to the next word; the engine's run swallows it.
            "split": r"reference: .*\['( +)'\] ' \w+'.*\n\s+engine: .*\['\1 '\] '\w+'",
            "encode": r"reference: .*\[\d+=b'( +)'\] \d+=b' \w+'.*\n\s+engine: .*\[\d+=b'\1 '\] \d+=b'\w+'",
        },
        repro_size={"split": 4, "encode": 4},  # two spaces and a letter: "  i"
    ),
    Mutant(
        "template_swallow_chatml",
        stages=("metadata", "render"),
        models=("qwen3-vocab",),
        fails=frozenset({"render"}),
        symptoms={"render": r"the reference refuses this input .* but the engine rendered '<\|im_start\|>"},
        repro_size={"render": 3},  # one message (its content shrunk to a character or two, or none)
    ),
    Mutant(
        "sampler_top_p_ge",
        stages=("metadata", "sample"),
        models=("qwen2.5-coder-0.5b-instruct",),
        fails=frozenset({"sample"}),
        symptoms={
            # The nucleus stops one candidate short.
            "sample": r"after step \d+ \(top_p\): candidate set differs — reference keeps (\d+) tokens, engine "
            r"(?!\1\b)\d+"
        },
    ),
    Mutant(
        "rope_interleaved",
        stages=("logits", "sample"),
        models=("tiny-qwen2-f32",),
        fails=frozenset({"logits"}),
        symptoms={
            # Position 0 is not rotated (angle 0), so the first disagreement comes later.
            "logits": r"max \|Δlogit\| [\d.]+ > tolerance .*; top-1 differs at \d+ positions, first position [1-9]",
        },
        extra=("-k", "not long_code_512"),
        repro_size={"logits/exact": 4, "logits/quantized": 6},  # a few prompt tokens
    ),
    Mutant(
        "stop_per_token",
        stages=("generate", "sample"),
        models=("tiny-qwen2-f32",),
        fails=frozenset({"generate"}),
        symptoms={
            # The stop string straddles two tokens: never seen, generation runs on to the length cap.
            "generate": r"stop \['(.+)'\]: expected .* \(stop_string, \d+ ids\), engine gave b'.*\1.*' \(length",
        },
    ),
]

# The gate module holding each stage (only those modules are collected: quicker).
GATE_FILES = {
    "metadata": "test_metadata.py",
    "split": "test_tokenizer.py",
    "encode": "test_tokenizer.py",
    "decode": "test_tokenizer.py",
    "render": "test_render.py",
    "template": "test_template_identity.py",
    "logits": "test_logits.py",
    "sample": "test_sample.py",
    "generate": "test_generate.py",
}


def gate_files(stages: tuple[str, ...]) -> list[str]:
    return sorted({f"specgate/gates/{GATE_FILES[s]}" for s in stages})


@pytest.mark.slow
@pytest.mark.parametrize("mutant", CASES, ids=[m.script for m in CASES])
def test_mutant_fails_exactly_its_stage(mutant: Mutant, tmp_path: Path) -> None:
    cached = {*model_cache.cached_models(), *model_cache.cached_tiny_models()}
    missing = [m for m in mutant.models if m not in cached]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch / specgate models tiny")
    impl = script_impl(MUTANTS / (mutant.script + ".py"))
    run = run_parity(
        tmp_path,
        impl,
        ",".join(mutant.stages),
        ",".join(mutant.models),
        "--shrink-group-budget",
        str(GROUP_BUDGET),
        "--shrink-budget",
        str(RUN_BUDGET),
        *mutant.extra,
        files=tuple(gate_files(mutant.stages)),
        timeout=1800,
    )
    report = run.report

    assert run.status == 1, f"a failing gate must fail the run\n{run.output[-3000:]}"
    ran = {row["stage"].split("/")[0] for row in report["matrix"]}  # logits/exact -> logits
    assert set(mutant.stages) <= ran, f"stages missing from the run: {set(mutant.stages) - ran}"
    bad = {c["stage"].split("/")[0] for c in report["cases"] if c["outcome"] in ("fail", "error")}
    assert bad == mutant.fails, (
        f"{mutant.script}: failing stages {sorted(bad)}, expected {sorted(mutant.fails)}"
    )
    for stage, symptom in mutant.symptoms.items():
        first = next(
            c for c in report["cases"] if c["stage"].split("/")[0] == stage and c["outcome"] == "fail"
        )
        assert re.search(symptom, first["message"]), (
            f"{mutant.script}: the {stage} failure does not show the defect's symptom /{symptom}/:\n{first['message']}"
        )
    check_triage(mutant, report, impl)


def check_triage(mutant: Mutant, report: dict, impl: str) -> None:
    """One group per cause: every failing stage row in exactly one group, and a planted bug
    that shows in several rows (both conformance classes, encode and split) one group over
    them all; a small reproducer, shrunk within the budget, where the group's first row can
    be replayed; ``specgate repro`` replays it."""
    failing_rows = sorted({c["stage"] for c in report["cases"] if c["outcome"] in ("fail", "error")})
    groups = [g for g in report["groups"] if g["outcome"] in ("fail", "error")]
    shown = "; ".join(f"{g['count']}× {g['signature']} (rows {g['stages']})" for g in groups)
    rows = [row for g in groups for row in g["stages"]]
    assert sorted(rows) == failing_rows, (
        f"{mutant.script}: every failing row {failing_rows} in one group: {shown}"
    )
    if any(g.get("diagnosis") for g in groups):  # a named cause: one group, however many rows
        assert len(groups) == 1, f"{mutant.script}: one planted cause, {len(groups)} groups: {shown}"
    for group in groups:
        limit = mutant.repro_size.get(group["stage"])
        if limit is None:
            assert group["reproducer"] is None and "cannot be replayed" in group["shrink_note"], group
            continue
        repro = group["reproducer"]
        assert repro is not None, (
            f"{mutant.script}: no reproducer for {group['stage']}: {group['shrink_note']}"
        )
        shrunk = repro["shrinking"]
        assert shrunk["to_size"] <= limit < shrunk["from_size"], (
            f"{mutant.script}: {group['stage']} reproducer of size {shrunk['to_size']} (limit {limit}): "
            f"{repro['input']}"
        )
        # a check started before the deadline may finish: one engine call, at most the cmd
        # client's request deadline (SPECGATE_CMD_TIMEOUT, 60 s) — not a quiet machine's timing
        assert shrunk["seconds"] <= GROUP_BUDGET + 60, shrunk
        # a diagnosed group is named by its cause; its reproducer keeps the divergence's signature
        assert repro["signature"] == group["divergence_signature"] and repro["outcome"] == group["outcome"]
    replayable = [g for g in groups if g["reproducer"] is not None]
    if replayable:
        path = replayable[0]["reproducer_file"]
        on_mutant = lifeline.run(
            [sys.executable, "-m", "specgate.cli", "repro", path, "--impl", impl],
            cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ),
        )  # fmt: skip
        assert on_mutant.returncode == 1, on_mutant.stdout + on_mutant.stderr
        assert "still diverges from the oracle, the same way" in on_mutant.stdout, on_mutant.stdout
        on_oracle = lifeline.run(
            [sys.executable, "-m", "specgate.cli", "repro", path, "--impl", "oracle"],
            cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ),
        )  # fmt: skip
        assert on_oracle.returncode == 0 and "no divergence" in on_oracle.stdout, (
            on_oracle.stdout + on_oracle.stderr
        )

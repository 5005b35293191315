"""Evidence that the gates catch defects in engines nobody here wrote.

Each engine in ``tests/engines/mutants/`` is the oracle with one planted defect,
served over PROTOCOL.md by its own script and gated through ``--impl 'cmd:...'``
as a real external process, exactly as an engine author's engine would be. Each
must fail exactly the stage its defect lives in — the other stages of the run
pass — and the first-divergence message must show the defect's symptom.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from impl import lifeline
from specgate import models as model_cache
from specgate.plugin import model_missing

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants")


@dataclass(frozen=True)
class Mutant:
    script: str
    stages: tuple[str, ...]  # stages run: the defect's own and unrelated ones that must still pass
    models: tuple[str, ...]
    fails: frozenset[str]  # exactly the stages that must fail
    symptoms: dict[str, str]  # stage -> regex the first failing case's message must match
    extra: tuple[str, ...] = ()  # more pytest arguments (to keep the run short)


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
    ),
    Mutant(
        "template_swallow_chatml",
        stages=("metadata", "render"),
        models=("qwen3-vocab",),
        fails=frozenset({"render"}),
        symptoms={"render": r"the reference refuses this input .* but the engine rendered '<\|im_start\|>"},
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
    return sorted({f"tests/gates/{GATE_FILES[s]}" for s in stages})


@pytest.mark.slow
@pytest.mark.parametrize("mutant", CASES, ids=[m.script for m in CASES])
def test_mutant_fails_exactly_its_stage(mutant: Mutant, tmp_path: Path) -> None:
    cached = {*model_cache.cached_models(), *model_cache.cached_tiny_models()}
    missing = [m for m in mutant.models if m not in cached]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch / specgate models tiny")
    impl = f"cmd:{sys.executable} {MUTANTS / (mutant.script + '.py')}"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *gate_files(mutant.stages),
        "-p",
        "no:cacheprovider",
        "-q",
        "--impl",
        impl,
        "--stages",
        ",".join(mutant.stages),
        "--models",
        ",".join(mutant.models),
        "--report-dir",
        str(tmp_path),
        *mutant.extra,
    ]
    proc = lifeline.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    (path,) = tmp_path.glob("parity-*.json")
    report = json.loads(path.read_text(encoding="utf-8"))

    assert proc.returncode == 1, f"a failing gate must fail the run\n{proc.stdout[-3000:]}"
    ran = {row["stage"] for row in report["matrix"]}
    assert set(mutant.stages) <= ran, f"stages missing from the run: {set(mutant.stages) - ran}"
    bad = {c["stage"] for c in report["cases"] if c["outcome"] in ("fail", "error")}
    assert bad == mutant.fails, (
        f"{mutant.script}: failing stages {sorted(bad)}, expected {sorted(mutant.fails)}"
    )
    for stage, symptom in mutant.symptoms.items():
        first = next(c for c in report["cases"] if c["stage"] == stage and c["outcome"] == "fail")
        assert re.search(symptom, first["message"]), (
            f"{mutant.script}: the {stage} failure does not show the defect's symptom /{symptom}/:\n{first['message']}"
        )

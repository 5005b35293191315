"""Acceptance (issue 13): adapters written from PROTOCOL.md alone pass on the oracle's
behaviour. ``tests/engines/contract/`` holds a tokenizer engine (HF ``tokenizers`` on
the model's ``tokenizer.json``) and a template engine (plain jinja2) that import
nothing from specgate; here the gate suite runs them through ``--impl 'cmd:...'`` on
``qwen3-vocab`` (a model that ships its tokenizer files), and every case must pass,
be n/a, or be a documented difference.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.child_pytest import run_pytest

CONTRACT = Path(__file__).with_name("contract")
MODEL = "qwen3-vocab"
# The template engine also renders a GGUF-only model whose template reads bos_token.
TEMPLATE_MODELS = [MODEL, "deepseek-r1-distill-qwen-7b-vocab"]

# Cases where an engine following PROTOCOL.md still differs, each for a reason the
# document states. HF tokenizers' regex engine (Oniguruma) has older Unicode tables
# than the `regex` release the split reference ran (PROTOCOL.md section 4.2,
# "Pre-tokenizer patterns"): code points assigned recently are not letters to it.
DOCUMENTED = {("split", "unicode-newly-assigned")}


@pytest.fixture(scope="module", autouse=True)
def _models_cached() -> None:
    missing = [m for m in TEMPLATE_MODELS if m not in model_cache.cached_models()]
    if missing:
        model_missing(f"{missing}; run: specgate models fetch")


def test_contract_adapters_import_nothing_from_specgate() -> None:
    for path in CONTRACT.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"specgate", "impl", "oracle", "tests"}, f"{path.name} imports {imported}"


def run_gates(
    tmp_path: Path, engine: str, gates: list[str], stages: str, models: list[str]
) -> tuple[int, dict, str]:
    reports = tmp_path / "reports"
    impl = "cmd:" + shlex.join([sys.executable, str(CONTRACT / engine)])
    # A request deadline out of reach: these runs judge conformance, not speed (the forward
    # engine's numpy trace missed the default 60 s at load 43).
    env = {**os.environ, "SPECGATE_CMD_TIMEOUT": "600"}
    proc = run_pytest(*gates, "-q", "--impl", impl, "--models", ",".join(models), "--stages", stages,
                      "--report-dir", reports, env=env, timeout=1200)  # fmt: skip
    (report,) = reports.glob("parity-*.json")
    return proc.returncode, json.loads(report.read_text(encoding="utf-8")), proc.stdout + proc.stderr


def undocumented_failures(report: dict) -> list[str]:
    bad = []
    for case in report["cases"]:
        if case["outcome"] in ("pass", "n/a", "reference-disagreement"):
            continue
        case_id = case["nodeid"].rsplit("/", 1)[-1].rstrip("]")
        if case["outcome"] == "fail" and (case["stage"], case_id) in DOCUMENTED:
            continue
        bad.append(f"{case['outcome']}: {case['nodeid']}: {case.get('message', '')[:300]}")
    return bad


@pytest.mark.slow  # a parity run of every tokenizer case through the example engine (~14 s)
def test_tokenizer_engine_from_the_protocol_passes_split_encode_decode(tmp_path: Path) -> None:
    status, report, out = run_gates(
        tmp_path, "tokenizer_engine.py", ["specgate/gates/test_tokenizer.py"], "split,encode,decode", [MODEL]
    )
    assert report["cases"], out[-3000:]
    assert undocumented_failures(report) == [], out[-3000:]
    # The documented split difference is HF's own pre-tokenizer, recorded in the split snapshot:
    # a disagreement naming it, and the run is green.
    skew = [c for c in report["cases"] if c["stage"] == "split" and c["case"] == "unicode-newly-assigned"]
    assert [c["outcome"] for c in skew] == ["reference-disagreement"] and "(hf)" in skew[0]["message"], skew
    assert status == 0, out[-3000:]
    passed = {c["stage"] for c in report["cases"] if c["outcome"] == "pass"}
    assert passed == {"split", "encode", "decode"}, passed


@pytest.mark.slow  # a full parity run of every render and construct case through a cmd: engine
def test_template_engine_from_the_protocol_passes_render_and_constructs(tmp_path: Path) -> None:
    status, report, out = run_gates(
        tmp_path, "template_engine.py", ["specgate/gates/test_render.py"], "render", TEMPLATE_MODELS
    )
    assert status == 0, out[-3000:]
    assert undocumented_failures(report) == [], out[-3000:]
    passed = {c["model"] for c in report["cases"] if c["outcome"] == "pass"}
    assert passed == {*TEMPLATE_MODELS, "constructs"}, passed  # the models' own templates, the constructs


@pytest.mark.slow
def test_forward_engine_passes_the_trace_gate(tmp_path: Path) -> None:
    """A forward pass written from PROTOCOL.md section 4.6 alone (numpy + gguf-py) passes
    ``trace/exact`` on a tiny model of each architecture; it claims no ``quantized`` class."""
    models = ["tiny-qwen2-f32", "tiny-qwen3-f32"]
    missing = [m for m in models if m not in model_cache.cached_tiny_models()]
    if missing:
        model_missing(f"{missing}; run: specgate models tiny")
    status, report, output = run_gates(
        tmp_path, "forward_engine.py", ["specgate/gates/test_trace.py"], "trace", models
    )
    outcomes = {(c["stage"], c["model"]): c["outcome"] for c in report["cases"]}
    assert outcomes == {
        **{("trace/exact", m): "pass" for m in models},
        **{("trace/quantized", m): "n/a" for m in models},
    }, output[-3000:]
    assert status == 0, output[-3000:]

"""A parametrization that can never apply is not generated: the reference recorders run
only for the models their stage records (``applies_to`` markers), so a skip in the live
tier means something. The expected model sets come from the corpus and the manifest,
not from the predicates."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

from specgate.supply import models, tiny_specs
from specgate.upkeep import corpus
from tests.child_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLER_MODELS = (
    "qwen2.5-coder-0.5b-instruct",
    "tiny-qwen2-f32",
    "tiny-qwen3-f32",
)  # corpus/sampler/windows.toml


def collect(selection: list[str], *extra: str) -> subprocess.CompletedProcess:
    return run_pytest("tests/references", "--live-references", "--co", "-q", "-p", "no:xdist",
                      "--models", ",".join(selection), *extra, timeout=300)  # fmt: skip


def collected(selection: list[str], *extra: str) -> dict[str, set[str]]:
    proc = collect(selection, *extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found: dict[str, set[str]] = defaultdict(set)
    for line in proc.stdout.splitlines():
        if "::" in line and "[" in line:
            test, param = line.split("[", 1)
            found[test.split("::")[-1]].add(param.rstrip("]"))
    return found


def test_recorders_are_generated_only_for_the_models_they_record() -> None:
    manifest = list(models.load_manifest())
    tiny = ["tiny-qwen2-f32", "tiny-qwen2-q4_k", "tiny-qwen3-f32", "tiny-qwen3-q8_0"]
    assert set(tiny) <= set(tiny_specs.model_ids())
    found = collected(manifest + tiny)
    for test in ("test_record_split", "test_record_encode", "test_record_decode"):
        assert found[test] == set(corpus.TOKENIZER_MODELS), test
    for test in ("test_record_render", "test_record_template_identity"):
        assert found[test] == set(corpus.TEMPLATE_MODELS), test
    assert found["test_record_metadata"] == {*manifest, "tiny-qwen2-f32", "tiny-qwen3-f32"}
    assert found["test_record_sample"] == set(SAMPLER_MODELS)
    weights = {m for m, e in models.load_manifest().items() if e.role == "full-weights"}
    assert found["test_record_logits"] == weights | set(tiny)


def test_the_live_tier_re_checks_the_forward_references_of_its_sample_only() -> None:
    """``--reference-models`` (the live tier's ``LIVE_REFERENCE_SAMPLE``) keeps the logits and
    trace recorders to its models; the other recorders keep every selected model; an
    unknown id stops the run with one line."""
    manifest = list(models.load_manifest())
    tiny = ["tiny-qwen2-f32", "tiny-qwen2-q4_k", "tiny-qwen3-f32", "tiny-qwen3-q8_0"]
    found = collected(manifest + tiny, "--reference-models", "tiny-qwen3-f32,qwen2.5-coder-0.5b-instruct")
    assert (
        found["test_record_logits"]
        == found["test_record_trace"]
        == {"tiny-qwen3-f32", "qwen2.5-coder-0.5b-instruct"}
    )
    assert found["test_record_metadata"] == {*manifest, "tiny-qwen2-f32", "tiny-qwen3-f32"}
    bad = collect(tiny, "--reference-models", "tiny-qwen9-f32")
    assert bad.returncode == 4, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "--reference-models: unknown model(s) tiny-qwen9-f32" in bad.stderr, bad.stderr[-2000:]
    assert "Traceback" not in bad.stdout + bad.stderr


def test_the_live_reference_sample_names_known_models() -> None:
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    sample = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LIVE_REFERENCE_SAMPLE"
    )
    ids = sample.split(",")
    assert len(ids) >= 4 and all(models.is_known_id(m) for m in ids), ids
    assert {"qwen2", "qwen3"} <= {m.split("-")[1] for m in ids if m.startswith("tiny-")}

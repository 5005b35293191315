"""A user's own GGUF, end to end, and a model update, end to end (README: "Your own
GGUF", "A model update"). Both run the real commands in a subprocess, on a tiny model
copied to a temporary path — the way a user's file lives outside the cache — with its
snapshots in a temporary ``--snapshot-dir``, never in the repository's ``snapshots/``.

* own GGUF: record every stage the file supports from the live references, gate the
  oracle against them (green), gate a planted-defect engine (red on logits);
* model update: a snapshot recorded on the file gates it; one metadata value of the
  file changes (the RoPE base); the gate refuses the stale snapshot naming both sha256
  and the command that regenerates it; regeneration; the snapshot-diff report names
  the provenance change and the changed case.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.gguf import open_gguf
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.upkeep.snapshots import SNAPSHOT_ROOT
from tests.child_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = "tiny-qwen2-f32"
ROPE_KEY = "qwen2.rope.freq_base"
GGUF_FLOAT32 = 6  # GGUF metadata value type id of a float32
#: Every stage a GGUF with weights and a chat template supports.
ALL_STAGES = {
    "metadata",
    "split",
    "encode",
    "decode",
    "render",
    "template",
    "logits",
    "sample",
    "generate",
    "trace",
}


def needs_live(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--live-references"):
        pytest.skip("records from the live references: run with --live-references")


@pytest.fixture
def user_gguf(tmp_path: Path) -> Path:
    """The tiny f32 model, copied to where a user's own file would be."""
    if TINY not in model_cache.cached_tiny_models():
        model_missing(f"{TINY} (run: specgate models tiny)")
    path = tmp_path / "models" / "my-model.gguf"
    path.parent.mkdir()
    shutil.copyfile(model_cache.model_dir(TINY) / f"{TINY}.gguf", path)
    return path


def record(model: Path, snapshot_dir: Path, *tests: str) -> None:
    """What ``nox -s snapshots -- --model PATH --snapshot-dir DIR`` runs first. A ceiling, not
    a timing: every reference recording loads transformers' and llama.cpp's weights of the
    user's file (the trace recording too: 3 min alone under this machine's load)."""
    proc = run_pytest(
        *(tests or ["tests/references"]),
        "--live-references",
        "--record-references",
        "--model",
        model,
        "--snapshot-dir",
        snapshot_dir,
        timeout=1800,
    )
    assert proc.returncode == 0, f"recording failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"


def gate(
    model: Path, snapshot_dir: Path, report_dir: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """What ``nox -s parity -- --model PATH --snapshot-dir DIR`` runs; the parity report's JSON."""
    proc = run_pytest(
        "specgate/gates", "--model", model, "--snapshot-dir", snapshot_dir, "--report-dir", report_dir, *args
    )
    reports = sorted(report_dir.glob("parity-*.json"))
    return proc, json.loads(reports[-1].read_text("utf-8")) if reports else {}


def outcomes(report: dict) -> dict[str, dict[str, int]]:
    """stage -> outcome -> count, from a parity report's cases."""
    out: dict[str, dict[str, int]] = {}
    for case in report["cases"]:
        stage = out.setdefault(case["stage"].split("/")[0], {})
        stage[case["outcome"]] = stage.get(case["outcome"], 0) + 1
    return out


@pytest.mark.slow
@pytest.mark.live
def test_own_gguf_recorded_then_gated(request, user_gguf: Path, tmp_path: Path) -> None:
    needs_live(request)
    snaps = tmp_path / "snaps"
    record(user_gguf, snaps)

    recorded = {p.stem for p in (snaps / "my-model").glob("*.json")}
    assert recorded == ALL_STAGES, f"stages recorded for the user's GGUF: {sorted(recorded)}"
    assert sorted(p.name for p in snaps.iterdir()) == ["my-model"], "only the user's model goes into DIR"
    assert not (SNAPSHOT_ROOT / "my-model").exists(), "the repository's snapshots/ must stay untouched"
    provenance = json.loads((snaps / "my-model" / "metadata.json").read_text("utf-8"))["provenance"]
    assert provenance["model_sha256"] == model_cache.sha256_file(user_gguf)

    proc, report = gate(user_gguf, snaps, tmp_path / "oracle")
    assert proc.returncode == 0, f"the oracle must pass its own model's gates:\n{proc.stdout[-3000:]}"
    by_stage = outcomes({"cases": [c for c in report["cases"] if c["model"] == "my-model"]})
    assert set(by_stage) == ALL_STAGES, f"stages gated for my-model: {sorted(by_stage)}"
    assert all(set(o) <= {"pass", "reference-disagreement"} for o in by_stage.values()), by_stage

    mutant = ROOT / "tests" / "engines" / "mutants" / "rope_interleaved.py"
    proc, report = gate(
        user_gguf,
        snaps,
        tmp_path / "mutant",
        "--impl",
        f"cmd:{sys.executable} {mutant}",
        "--stages",
        "logits",
    )
    assert proc.returncode == 1, f"a planted RoPE defect must fail the run:\n{proc.stdout[-3000:]}"
    failed = outcomes(report)["logits"].get("fail", 0)
    assert failed > 0, f"the logits gate did not catch the interleaved RoPE: {outcomes(report)}"


def set_float32(path: Path, key: str, value: float) -> None:
    """Rewrite the float32 metadata value ``key`` of the GGUF at ``path`` in place
    (same size: the tensors stay where they are)."""
    data = bytearray(path.read_bytes())
    encoded = key.encode("utf-8")
    at = data.find(struct.pack("<Q", len(encoded)) + encoded)
    assert at >= 0, f"{key} not in {path}"
    at += 8 + len(encoded)
    assert struct.unpack_from("<I", data, at)[0] == GGUF_FLOAT32, f"{key} is not a float32"
    struct.pack_into("<f", data, at + 4, value)
    path.write_bytes(bytes(data))


@pytest.fixture
def recorded_metadata(user_gguf: Path, tmp_path: Path) -> Path:
    """A snapshot directory holding the tiny model's committed metadata snapshot, under
    the copy's id: recorded from exactly these bytes, so it gates the copy."""
    before = tmp_path / "before"
    (before / "my-model").mkdir(parents=True)
    shutil.copyfile(SNAPSHOT_ROOT / TINY / "metadata.json", before / "my-model" / "metadata.json")
    return before


def changed_model(user_gguf: Path, before: Path, tmp_path: Path) -> tuple[str, str]:
    """Gate the copy (green), change its RoPE base, gate again: refused as stale, with one
    setup error line (exit status 4), never an outcome of the engine.
    Returns the old and the new sha256."""
    old = model_cache.sha256_file(user_gguf)
    proc, _ = gate(user_gguf, before, tmp_path / "ok", "--stages", "metadata")
    assert proc.returncode == 0, f"the recorded snapshot must gate the unchanged copy:\n{proc.stdout[-3000:]}"

    set_float32(user_gguf, ROPE_KEY, 500_000.0)
    assert open_gguf(user_gguf, header_only=True).metadata[ROPE_KEY] == 500_000.0
    new = model_cache.sha256_file(user_gguf)
    proc, report = gate(user_gguf, before, tmp_path / "stale", "--stages", "metadata")
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 4, f"a stale snapshot is a setup error:\n{proc.stdout[-3000:]}"
    assert len(errors) == 1 and not report, "one line, and no engine outcomes"
    message = errors[0]
    for needed in (
        "STALE SNAPSHOT",
        old,
        new,
        f"nox -s snapshots -- --model {user_gguf} --snapshot-dir {before}",
    ):
        assert needed in message, f"the setup error does not name {needed!r}:\n{message}"
    return old, new


def test_model_update_refuses_the_stale_snapshot(
    user_gguf: Path, recorded_metadata: Path, tmp_path: Path
) -> None:
    changed_model(user_gguf, recorded_metadata, tmp_path)


@pytest.mark.slow
@pytest.mark.live
def test_model_update_regenerated_and_diffed(
    request, user_gguf: Path, recorded_metadata: Path, tmp_path: Path
) -> None:
    needs_live(request)
    old, new = changed_model(user_gguf, recorded_metadata, tmp_path)

    after = tmp_path / "after"
    shutil.copytree(recorded_metadata, after)  # as `nox -s snapshots` keeps the before copy
    record(user_gguf, after, "tests/references/test_metadata.py")
    proc, _ = gate(user_gguf, after, tmp_path / "regenerated", "--stages", "metadata")
    assert proc.returncode == 0, f"the regenerated snapshot must gate the new file:\n{proc.stdout[-3000:]}"

    out = tmp_path / "snapshot-diff.md"
    diff = subprocess.run(
        [
            sys.executable,
            "-m",
            "specgate.upkeep.snapshot_diff",
            str(recorded_metadata),
            str(after),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert diff.returncode == 0, diff.stderr
    text = out.read_text("utf-8")
    for needed in (old, new, "hparams.rope_base", "1000000", "500000"):
        assert needed in text, f"the snapshot-diff report does not name {needed!r}:\n{text}"


@pytest.mark.slow
@pytest.mark.live
def test_vocab_only_gguf_records_no_forward_stages(request, tmp_path: Path) -> None:
    """A GGUF without tensors gets the stages its vocabulary supports, none that need weights."""
    needs_live(request)
    vocab = "qwen3-vocab"
    if vocab not in model_cache.cached_models():
        model_missing(f"{vocab} (run: specgate models fetch {vocab})")
    path = tmp_path / "my-vocab.gguf"
    shutil.copyfile(model_cache.model_ref(vocab).gguf, path)
    ref = model_cache.model_ref(str(path))
    assert (ref.role, model_cache.has_weights(ref), model_cache.has_chat_template(ref)) == (
        "user",
        False,
        True,
    )

    snaps = tmp_path / "snaps"
    forward = [f"tests/references/test_{s}.py" for s in ("logits", "sample", "generate", "trace", "metadata")]
    record(path, snaps, *forward)
    assert sorted(p.stem for p in (snaps / "my-vocab").glob("*.json")) == ["metadata"]

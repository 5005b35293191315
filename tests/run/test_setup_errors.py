"""Setup problems are setup errors (issue 24): a snapshot recorded from another model
file (stale), a snapshot file that cannot be read, or one that is not a snapshot, stop
the parity run after collection with one ``ERROR:`` line naming the fix and exit status
4 — never per-case outcomes counted against the engine, never a collection traceback.

Each case copies the committed ``qwen3-vocab`` encode snapshot into a temporary
``--snapshot-dir``, damages the copy, and runs the gates as ``nox -s parity`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.upkeep.snapshots import SNAPSHOT_ROOT

ROOT = Path(__file__).resolve().parents[2]
VOCAB = "qwen3-vocab"
STALE_SHA = "0" * 64


def stale(path: Path) -> None:
    data = json.loads(path.read_text("utf-8"))
    data["provenance"]["model_sha256"] = STALE_SHA
    path.write_text(json.dumps(data), "utf-8")


def not_json(path: Path) -> None:
    path.write_text('{"provenance": {"model": "qwen3-vocab"}, "cases": {', "utf-8")


def not_utf8(path: Path) -> None:
    path.write_bytes(b'{"cases": {"\xff\xfe": 1}}')


def a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def no_provenance(path: Path) -> None:
    data = json.loads(path.read_text("utf-8"))
    path.write_text(json.dumps({"cases": data["cases"]}), "utf-8")


def case_not_an_object(path: Path) -> None:
    data = json.loads(path.read_text("utf-8"))
    data["cases"]["plain-ascii/plain"] = [1, 2, 3]
    path.write_text(json.dumps(data), "utf-8")


DAMAGE: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "stale": (
        stale,
        [
            "STALE SNAPSHOT",
            f"recorded from model sha256 {STALE_SHA}",
            "regenerate the references with: nox -s snapshots -- --model",
            f"re-fetch the model with `specgate models fetch {VOCAB}`",
        ],
    ),
    "not json": (not_json, ["malformed snapshot file", "not JSON", "re-record it with `nox -s snapshots"]),
    "not utf-8": (not_utf8, ["malformed snapshot file", "not JSON", "re-record it with `nox -s snapshots"]),
    "unreadable": (
        a_directory,
        ["is a directory, not a regular file", "re-record it with `nox -s snapshots"],
    ),
    "no provenance": (no_provenance, ["malformed snapshot file", "no provenance object"]),
    "case not an object": (case_not_an_object, ["case 'plain-ascii/plain' is not an object"]),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_snapshot_problem_is_one_setup_error(damage: str, tmp_path: Path) -> None:
    check_setup_error(damage, tmp_path, "-p", "no:xdist")


@pytest.mark.slow  # starts two xdist workers
def test_a_stale_snapshot_is_one_setup_error_under_xdist(tmp_path: Path) -> None:
    """A worker cannot stop the run: it runs nothing, and the controller says the line."""
    check_setup_error("stale", tmp_path, "-n", "2", "--dist", "loadfile")


def check_setup_error(damage: str, tmp_path: Path, *workers: str) -> None:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch {VOCAB}")
    snaps = tmp_path / "snaps"
    (snaps / VOCAB).mkdir(parents=True)
    target = snaps / VOCAB / "encode.json"
    shutil.copyfile(SNAPSHOT_ROOT / VOCAB / "encode.json", target)
    change, says = DAMAGE[damage]
    change(target)
    reports = tmp_path / "reports"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "specgate/gates/test_tokenizer.py",
        "-p",
        "no:cacheprovider",
        "-q",
        "-p",
        "no:xdist",
    ]
    cmd += [
        "--models",
        VOCAB,
        "--stages",
        "encode",
        "--snapshot-dir",
        str(snaps),
        "--report-dir",
        str(reports),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 4, output[-3000:]
    assert len(errors) == 1, errors or output[-3000:]
    assert str(target) in errors[0] and all(s in errors[0] for s in says), errors[0]
    assert "Traceback" not in output and " passed" not in output and " failed" not in output
    assert not reports.exists() or not list(reports.iterdir()), "a setup error leaves no engine outcomes"

"""Provenance and verdict in every report (issue 24), on real runs of the gates: the
oracle in process (green) and a planted failing engine over ``cmd:`` (red), each
report's Markdown, JSON and HTML, and the report ``specgate report merge`` writes.

The expected values come from outside the report code: the lock file hashed here,
git asked here, the handshake the planted engine sends (``fault_engine.py toy``), the
failures counted from the report's own cases."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path

import pytest

from specgate import cli
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import ROOT, run_parity, script_impl

VOCAB = "qwen3-vocab"
TOY = ROOT / "tests" / "engines" / "fault_engine.py"


@pytest.fixture(autouse=True)
def vocab() -> None:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch {VOCAB}")


def reports(folder: Path) -> tuple[str, str]:
    md = next(folder.glob("parity-*.md")).read_text("utf-8")
    html = next(folder.glob("parity-*.html")).read_text("utf-8")
    return md, html


def check_provenance(prov: dict, impl: str) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    lock = hashlib.sha256((ROOT / "constraints" / "references.txt").read_bytes()).hexdigest()
    assert prov["specgate"]["version"] and prov["specgate"]["version"] != "unknown (not installed)"
    if head.returncode == 0:
        assert prov["specgate"]["commit"].startswith(head.stdout.strip())
    assert prov["lock"] == {"file": "constraints/references.txt", "sha256": lock}
    assert prov["python"] == platform.python_version() and prov["platform"] == platform.platform()
    assert prov["date"][:4].isdigit() and "T" in prov["date"]
    assert f"--impl {impl}" in prov["command"] or f"--impl '{impl}'" in prov["command"], prov["command"]
    assert prov["models"] == [VOCAB] and prov["stages"] == ["encode"] and prov["shard"] is None


@pytest.mark.slow  # a parity run in a subprocess
def test_a_green_run_reports_who_what_and_pass(tmp_path: Path) -> None:
    run = run_parity(tmp_path, "oracle", "encode", VOCAB, "--max-cases", "12", "-p", "no:xdist", timeout=300)
    assert run.status == 0, run.output[-3000:]
    prov = run.report["provenance"]
    check_provenance(prov, "oracle")
    engine = prov["engine"]
    assert engine["adapter"] == "impl.oracle.OracleEngine" and engine["name"] == "oracle"
    assert engine["classes"] == ["exact", "quantized"] and engine["version"]
    assert run.report["verdict"] == {"result": "pass", "reasons": [], "rules": []}
    md, html = reports(tmp_path / "reports")
    assert "\n**Verdict: PASS**\n" in md.split("| stage |")[0]
    assert "adapter impl.oracle.OracleEngine" in md and prov["lock"]["sha256"] in md
    assert 'id="verdict">Verdict: PASS<' in html and prov["lock"]["sha256"] in html


@pytest.mark.slow  # a parity run and a merge
def test_a_red_run_reports_its_engine_and_every_reason(tmp_path: Path) -> None:
    impl = script_impl(TOY, "toy")
    run = run_parity(tmp_path, impl, "encode", VOCAB, "--max-cases", "12", "-p", "no:xdist", timeout=300)
    assert run.status == 1, run.output[-3000:]
    prov = run.report["provenance"]
    check_provenance(prov, impl)
    engine = prov["engine"]
    assert (engine["name"], engine["version"], engine["classes"]) == ("toy", "1.0", ["quantized"])
    assert engine["protocol"] == "specgate-jsonl/1" and engine["adapter"].startswith("impl.process.client.")
    failed = run.outcomes().get("fail", 0)
    assert failed > 0, run.outcomes()
    reason = f"encode · {VOCAB}: {failed} failed of {len(run.report['cases'])} cases"
    verdict = run.report["verdict"]
    assert verdict["result"] == "fail" and reason in verdict["reasons"], verdict
    md, html = reports(tmp_path / "reports")
    head = md.split("| stage |")[0]
    assert "**Verdict: FAIL**" in head and f"- {reason}" in head and "- engine: toy 1.0" in head
    assert 'id="verdict">Verdict: FAIL<' in html and reason in html

    merged = tmp_path / "merged"
    (report_json,) = (tmp_path / "reports").glob("parity-*.json")
    assert cli.main(["report", "merge", str(report_json), "--out", str(merged)]) == 1
    (merged_json,) = merged.glob("parity-*.json")
    whole = json.loads(merged_json.read_text("utf-8"))
    assert whole["verdict"] == verdict
    assert whole["provenance"]["engine"] == engine and whole["provenance"]["lock"] == prov["lock"]
    assert whole["provenance"]["merged_from"][0]["file"] == report_json.name
    md, html = reports(merged)
    assert "**Verdict: FAIL**" in md and reason in md and 'id="verdict">Verdict: FAIL<' in html

"""Reports never overwrite each other: every report file of a run — Markdown, JSON,
PNG and the JUnit XML of ``--parity-junit`` — is named by one stem derived from the
whole ``--impl`` string, readable and collision-free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specgate.plugin import GateRecord, SpecgateSession
from specgate.report import report_stem, write_reports

ROOT = Path(__file__).resolve().parents[1]

# Pairs the old names (the impl string's characters folded, cut at its last dot by
# ``with_suffix``) gave one file: two scripts, two servers on other ports.
IMPLS = [
    "cmd:python engine.py",
    "cmd:python engine_py",
    "cmd:python engine.v2.py",
    "cmd:python engine.v3.py",
    "http:http://127.0.0.1:8080",
    "http:http://127.0.0.1:8081",
    "oracle",
]


def test_stems_are_distinct_readable_and_dot_free():
    stems = [report_stem(i) for i in IMPLS]
    assert len(set(stems)) == len(stems)
    assert all("." not in s and "/" not in s and " " not in s for s in stems)
    assert report_stem("cmd:python engine.py").startswith("parity-cmd_python_engine_py-")


def test_two_engines_writing_into_one_folder_keep_all_their_files(tmp_path: Path):
    written = []
    for impl in IMPLS:
        session = SpecgateSession(impl=impl, records=[GateRecord("encode", "m", "pass", f"{impl}::t")])
        written += write_reports(session, tmp_path)
    assert len({p.name for p in written}) == len(written)
    for impl in IMPLS:
        stem = report_stem(impl)
        assert {p.suffix for p in tmp_path.glob(stem + ".*")} >= {".md", ".json"}


def test_the_junit_xml_takes_the_same_stem(tmp_path: Path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_verdict_rules.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "first_difference",
            "--impl",
            "oracle",
            "--parity-junit",
            "--report-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (tmp_path / f"{report_stem('oracle')}.xml").exists(), sorted(tmp_path.iterdir())

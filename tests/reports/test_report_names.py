"""Reports never overwrite each other: every report file of a run — Markdown, JSON,
PNG and the JUnit XML of ``--parity-junit`` — is named by one stem derived from the
whole ``--impl`` string, readable and collision-free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specgate.plugin import GateRecord, SpecgateSession
from specgate.reports.parity_report import report_stem, write_reports
from tests.child_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]

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
            "tests/outcomes/test_verdict_rules.py",
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


def test_a_report_name_replaces_the_port_in_every_file_name(tmp_path: Path):
    """``--report-name`` (the ecosystem runner passes a server engine's key): every report
    file — Markdown, JSON and the JUnit XML — is named from it, so a loopback port never
    names a committed file; the impl string is still the report's title."""
    impl = "http:http://127.0.0.1:8080"
    session = SpecgateSession(
        impl=impl, report_name="llama_cpp_server", records=[GateRecord("encode", "m", "pass", "t")]
    )
    written = write_reports(session, tmp_path)
    assert written and all(p.name.startswith(report_stem("llama_cpp_server")) for p in written), written
    assert all("8080" not in p.name for p in written)
    assert impl in next(p for p in written if p.suffix == ".md").read_text(encoding="utf-8")
    proc = run_pytest("tests/outcomes/test_verdict_rules.py", "-q", "-k", "first_difference", "--impl", "oracle",
                      "--report-name", "named", "--parity-junit", "--report-dir", tmp_path / "run", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (tmp_path / "run" / f"{report_stem('named')}.xml").exists(), sorted((tmp_path / "run").iterdir())


def test_the_ecosystem_names_a_server_engines_reports_by_its_key():
    from specgate.ecosystem.gating import gate_command

    command = gate_command(
        "http:http://127.0.0.1:40123", ["encode"], ["m"], Path("out"), [], "llama_cpp_server"
    )
    assert command[command.index("--report-name") + 1] == "llama_cpp_server"

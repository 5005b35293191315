"""Where reports go (issue 38, round 3): a ``--report-dir`` that is a file or cannot be
written into is one usage line before any case runs; a disk that fills while the
reports are written is one ``ERROR:`` line and exit status 4, and leaves no truncated
report (``files.write_text`` writes a temporary file and renames it); ``report diff
--markdown`` into a missing folder or onto ``/dev/full`` and ``report merge --out`` a
file are one line and exit status 4 — for ``diff`` never 1, which means "regressed".

Before: INTERNALERROR and exit 3 for ``--report-dir`` a file or a ``/sys`` path; an
``OSError`` traceback and a truncated JSON report on a full disk; tracebacks and exit 1
for the ``diff``/``merge`` destinations.

A full disk is made portably with ``RLIMIT_FSIZE`` (Python ignores SIGXFSZ, so a write
past the limit fails with EFBIG, as one past a full disk fails with ENOSPC)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reports.test_report_files import one_line, report, specgate, write

ROOT = Path(__file__).resolve().parents[2]
MODEL = "qwen3-vocab"
RUN = [sys.executable, "-m", "specgate", "parity", "-q", "-p", "no:cacheprovider", "--impl", "oracle"]


def parity(report_dir: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [*RUN, "--stages", "encode", "--models", MODEL, "--max-cases", "3", "--report-dir", report_dir],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=limit,
    )


def usage_line(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, f"exit {proc.returncode}: {out[-3000:]}"
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and needle in errors[0], out[-3000:]


@pytest.fixture(scope="module")
def vocab_model() -> None:
    from specgate.plugin import model_missing
    from specgate.supply import models as model_cache

    try:
        model_cache.model_ref(MODEL)
    except model_cache.ModelError as exc:
        model_missing(str(exc))


def test_a_report_dir_that_is_a_file_is_one_usage_line(tmp_path: Path, vocab_model: None) -> None:
    a_file = tmp_path / "reports"
    a_file.write_text("not a folder", encoding="utf-8")
    usage_line(parity(str(a_file)), "--report-dir")
    assert a_file.read_text(encoding="utf-8") == "not a folder"


@pytest.mark.skipif(
    not Path("/sys/kernel").is_dir(),
    reason="no sysfs on this machine: /sys/kernel is the read-only folder this test points --report-dir at; the file and missing-folder cases above still run",
)
def test_a_report_dir_in_sys_is_one_usage_line(vocab_model: None) -> None:
    usage_line(parity("/sys/kernel/specgate-reports"), "--report-dir")


def test_a_full_disk_is_one_error_line_and_no_truncated_report(tmp_path: Path, vocab_model: None) -> None:
    reports = tmp_path / "reports"
    proc = parity(str(reports), fsize=12 * 1024)
    usage_line(proc, "cannot write")
    for path in reports.rglob("*"):
        assert not path.name.startswith("."), f"a temporary file left behind: {path.name}"
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))  # whole, or not there at all


@pytest.fixture
def two_reports(tmp_path: Path) -> tuple[Path, Path]:
    return write(tmp_path / "old.json", report()), write(tmp_path / "new.json", report())


def test_diff_markdown_into_a_missing_folder_is_exit_4(tmp_path: Path, two_reports) -> None:
    target = tmp_path / "no" / "such" / "summary.md"
    one_line(specgate("report", "diff", *map(str, two_reports), "--markdown", str(target)), str(target))


@pytest.mark.skipif(
    not Path("/dev/full").exists(),
    reason="no /dev/full on this machine: the always-full device this test writes to; the RLIMIT_FSIZE full-disk test above still runs",
)
def test_diff_markdown_onto_dev_full_is_exit_4(two_reports) -> None:
    one_line(specgate("report", "diff", *map(str, two_reports), "--markdown", "/dev/full"), "/dev/full")
    assert Path("/dev/full").is_char_device()  # never replaced by a file


def test_merge_out_a_file_is_exit_4(tmp_path: Path, two_reports) -> None:
    out = tmp_path / "out"
    out.write_text("a file", encoding="utf-8")
    one_line(specgate("report", "merge", str(two_reports[1]), "--out", str(out)), str(out), "not a directory")
    assert out.read_text(encoding="utf-8") == "a file"

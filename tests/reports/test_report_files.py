"""Report files in, one line out (issue 38, round 3): ``specgate report merge``, ``diff``
and ``summary`` take any path a user gives them. A malformed report, a FIFO,
``/dev/zero``, a missing file or a report that would take gigabytes to parse is one
line naming the file and the problem, exit status 4 (a usage error), in bounded time
and memory (``files.read_json``); a merged shard's hostile stage, node id or model id
is shown inert (``text_safety``) or refused, never used as a path.

Before: 8 tracebacks (exit 1) for the malformed merges, a hang on a FIFO, a traceback
for a missing summary, 2.4 GB for a 100 MB report of empty lists, a live heading, a raw
ESC and ill-formed JUnit XML from a hostile stage, and the text of a file outside the
snapshots (``model: ../../…/leak``) in the merged HTML and JSON.

Every command is a real ``python -m specgate`` process over real files in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from specgate.upkeep.snapshots import SNAPSHOT_ROOT
from tests.engines.test_inert_everywhere import RAW_CONTROLS, assert_markdown_inert

ROOT = Path(__file__).resolve().parents[2]
PEAK_RSS = ROOT / "tests" / "engines" / "peak_rss.py"
GB = 1 << 30
TIMEOUT = 120  # a command that hangs on a FIFO fails here instead of hanging the suite


def specgate(*args: str, measure: Path | None = None) -> subprocess.CompletedProcess[str]:
    wrapper = [sys.executable, str(PEAK_RSS), str(measure)] if measure else []
    return subprocess.run(
        [*wrapper, sys.executable, "-m", "specgate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def one_line(proc: subprocess.CompletedProcess[str], *needles: str, code: int = 4) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == code, f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-3000:]}"
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in err, err
    return err


def case(**fields: Any) -> dict[str, Any]:
    return {
        "stage": "encode",
        "model": "qwen3-vocab",
        "outcome": "fail",
        "nodeid": "specgate/gates/test_tokenizer.py::test_encode[qwen3-vocab-c1]",
        "message": "ids differ",
        "metrics": {},
        "case": "c1",
        "answers": {},
        **fields,
    }


def report(**fields: Any) -> dict[str, Any]:
    return {"impl": "cmd:engine", "shard": None, "provenance": None, "cases": [case()], **fields}


def write(path: Path, payload: Any) -> Path:
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


MALFORMED = {
    "cases: [1]": (report(cases=[1]), "case 0 is 1, not an object"),
    "impl as a list": (report(impl=["cmd:a"]), "its impl is not a string"),
    "an extra key": (report(cases=[case(extra=1)]), "unknown fields: 'extra'"),
    "an integer shard": (report(shard=3), "its shard is 3"),
    "metrics as a list": (report(cases=[case(metrics=[1])]), "metrics are list"),
    "a message as a dict": (report(cases=[case(message={"a": 1})]), "message is dict"),
    "a null stage": (report(cases=[case(stage=None)]), "stage is null"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_report_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    payload, problem = MALFORMED[name]
    path = write(tmp_path / "shard.json", payload)
    one_line(specgate("report", "merge", str(path), "--out", str(tmp_path / "out")), str(path), problem)
    assert not (tmp_path / "out").exists()


def test_a_report_nested_100k_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"impl": "x", "cases": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    one_line(specgate("report", "merge", str(path)), str(path), "nested too deep")
    one_line(specgate("report", "diff", str(path), str(path)), str(path), "nested too deep")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("command", ["merge", "diff", "summary"])
def test_a_fifo_or_dev_zero_is_refused_unread(tmp_path: Path, kind: str, command: str) -> None:
    path = tmp_path / ("report.md" if command == "summary" else "report.json")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    args = [str(path), str(path)] if command == "diff" else [str(path)]
    what = "FIFO" if kind == "fifo" else "character device"
    one_line(specgate("report", command, *args), str(path), f"is a {what}, not a regular file")


def test_a_missing_summary_file_is_one_line(tmp_path: Path) -> None:
    one_line(specgate("report", "summary", str(tmp_path / "gone.md")), "gone.md", "No such file")


def test_a_report_too_costly_to_parse_is_refused_before_parsing(tmp_path: Path) -> None:
    """100 MB of ``[]`` (under the 512 MB byte cap) parses into ~2.4 GB of lists: refused
    on its estimated cost, the command's peak a small multiple of the file."""
    path = tmp_path / "bomb.json"
    with path.open("wb") as f:
        f.write(b'{"impl": "x", "cases": [')
        f.write(b"[]," * ((100 << 20) // 3))
        f.write(b"[]]}")
    peak_file = tmp_path / "peak.json"
    err = one_line(specgate("report", "diff", str(path), str(path), measure=peak_file), str(path), "to parse")
    peak = json.loads(peak_file.read_text(encoding="utf-8"))["peak_bytes"]
    assert peak < 1 * GB, f"peak {peak / GB:.2f} GB: {err}"


HOSTILE_STAGE = "encode\n## FAKE: all 999 cases passed\n<details open>\x1b[31m $\\frac{$ ]]> \x00"


def test_a_hostile_stage_and_node_id_in_a_shard_are_inert(tmp_path: Path) -> None:
    hostile = case(stage=HOSTILE_STAGE, nodeid="x::y[<details open>\x1b]]>\x00`]", message="\x1b[2J<!--")
    path = write(tmp_path / "shard.json", report(cases=[hostile, case(outcome="pass", nodeid="ok")]))
    out = tmp_path / "out"
    proc = specgate("report", "merge", str(path), "--out", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not RAW_CONTROLS.search(proc.stdout + proc.stderr)
    (md,) = out.glob("parity-*.md")
    assert_markdown_inert(md.read_text(encoding="utf-8"), "merged Markdown")
    (xml,) = out.glob("parity-*.xml")
    text = xml.read_text(encoding="utf-8")
    assert not RAW_CONTROLS.search(text)
    names = [c.get("classname", "") for c in ET.fromstring(text.encode("utf-8")).iter("testcase")]
    assert any("FAKE" in n for n in names), names  # there, as text
    (html,) = out.glob("parity-*.html")
    assert not RAW_CONTROLS.search(html.read_text(encoding="utf-8"))
    assert list(out.glob("parity-*.png")) or "Pillow not installed" in proc.stdout


def test_a_model_id_that_is_a_path_is_refused_never_read(tmp_path: Path) -> None:
    leak = tmp_path / "leak"
    leak.mkdir()
    write(leak / "encode.json", {"cases": {"c1": {"text": "SECRET-TEXT-OF-ANOTHER-FILE", "ids": [1]}}})
    model = os.path.relpath(leak, SNAPSHOT_ROOT)
    assert model.startswith("..")
    path = write(tmp_path / "shard.json", report(cases=[case(model=model)]))
    out = tmp_path / "out"
    one_line(specgate("report", "merge", str(path), "--out", str(out)), str(path), "is no model id")
    written = "".join(p.read_text(encoding="utf-8", errors="replace") for p in out.rglob("*") if p.is_file())
    assert "SECRET-TEXT" not in written

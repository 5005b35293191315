"""The parity report's layout — its Markdown, JSON and HTML — kept as syrupy snapshots
(``tests/reports/__snapshots__/test_report_layout/`` and ``test_report_layout.ambr``), written from a fixed set of gate records so
that a change to any heading, table, field or the page shows as a diff to review (and
``pytest --snapshot-update`` to accept). What differs run to run is fixed, not masked:
the provenance (engine, specgate version and commit, lock sha256, Python, platform, date,
command) is given; the records name no snapshot case, so the case browser reads no
reference file; the PNG (its date) is not compared, only named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specgate.outcomes.verdict import GateRecord, run_verdict
from specgate.reports import parity_report as report
from tests.text_snapshots import JsonFile, MarkdownFile

TOK = "specgate/gates/test_tokenizer.py"
RECORDS = [
    GateRecord("encode", "qwen3-vocab", "pass", f"{TOK}::test_encode[qwen3-vocab-ascii]"),
    GateRecord("encode", "qwen3-vocab", "pass", f"{TOK}::test_encode[qwen3-vocab-cjk]"),
    GateRecord(
        "encode",
        "qwen3-vocab",
        "fail",
        f"{TOK}::test_encode[qwen3-vocab-nfc]",
        "ids differ at position 3: reference 1234, engine 1235\nreference: [9707, 11, 1879, 1234]\n"
        "engine:    [9707, 11, 1879, 1235]",
    ),
    GateRecord(
        "encode",
        "qwen3-vocab",
        "fail",
        f"{TOK}::test_encode[qwen3-vocab-nfd]",
        "ids differ at position 0: reference 68, engine 69\nreference: [68]\nengine:    [69]",
    ),
    GateRecord("split", "qwen3-vocab", "n/a", f"{TOK}::test_split[qwen3-vocab-ascii]", "split not offered"),
    GateRecord(
        "decode",
        "qwen3-vocab",
        "reference-disagreement",
        f"{TOK}::test_decode[qwen3-vocab-ffd]",
        "matches tokenizers, not the primary reference llama.cpp",
    ),
    GateRecord(
        "render",
        "qwen2.5-coder-0.5b-instruct",
        "refused",
        "specgate/gates/test_render.py::test_render[qwen2.5-coder-0.5b-instruct-tools]",
        "tools are not supported",
    ),
    GateRecord(
        "logits/exact",
        "tiny-qwen3-f32",
        "pass",
        "specgate/gates/test_logits.py::test_logits[tiny-qwen3-f32-hello]",
        "",
        {"kl_max": 1.5e-07, "max_abs_dlogit": 0.00031, "top1_agree": 1.0},
    ),
    GateRecord(
        "logits/exact",
        "tiny-qwen3-f32",
        "error",
        "specgate/gates/test_logits.py::test_logits[tiny-qwen3-f32-long]",
        "EngineDied: the engine exited with status 1 while answering logits",
    ),
]
PROVENANCE = {
    "engine": {
        "impl": "cmd:my-engine --specgate",
        "adapter": "impl.process.client.CmdEngine",
        "name": "my-engine",
        "version": "1.2.3",
        "classes": ["exact"],
        "protocol": "specgate-jsonl/1",
    },
    "specgate": {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567"},
    "lock": {"file": "constraints/references.txt", "sha256": "ab" * 32},
    "python": "3.11.2",
    "platform": "Linux-6.1.0-x86_64-with-glibc2.36",
    "date": "2026-12-01T23:00:00+00:00",
    "command": "pytest tests/gates --impl 'cmd:my-engine --specgate'",
    "models": ["qwen3-vocab", "qwen2.5-coder-0.5b-instruct", "tiny-qwen3-f32"],
    "stages": ["encode", "split", "decode", "render", "logits"],
    "shard": None,
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    run = SimpleNamespace(
        impl="cmd:my-engine --specgate", records=RECORDS, provenance=PROVENANCE, verdict=run_verdict(RECORDS)
    )
    return {path.suffix: path for path in report.write_reports(run, tmp_path_factory.mktemp("report"))}


def test_markdown_report_layout(written: dict[str, Path], snapshot) -> None:
    assert written[".md"].read_text(encoding="utf-8") == snapshot(extension_class=MarkdownFile)


def test_json_report_layout(written: dict[str, Path], snapshot) -> None:
    assert written[".json"].read_text(encoding="utf-8") == snapshot(extension_class=JsonFile)


def test_html_report_layout(written: dict[str, Path], snapshot) -> None:
    """In syrupy's own amber file: the page inlines report_html's CSS and script verbatim, and a
    ``.html`` copy of them would read, to a duplicate finder, as a second copy of that source."""
    assert written[".html"].read_text(encoding="utf-8") == snapshot


def test_report_file_names(written: dict[str, Path], snapshot) -> None:
    assert sorted(path.name for path in written.values()) == snapshot

"""One hostile engine through every report format and every place that shows engine text
(issue 38, "inert everywhere"): a real ``cmd:`` engine (``hostile_engine.py
hostile-handshake``) whose handshake name and version, errors, refusals, answers and
stderr hold live Markdown, live HTML, a fence, NUL, BEL, ESC, C1 and bidi controls.

Main put the handshake name into the Markdown's provenance line raw: a live ``## FAKE``
heading, a live ``<details>`` and raw NUL/ESC bytes in ``parity-*.md``. Here the run's
Markdown, HTML, JSON, JUnit XML and PNG, the merged report's, ``report summary``'s and
``report diff``'s output, ``specgate repro``'s output, the terminal and the file names
are each parsed as what they are and checked inert."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.engines.hostile_engine import HOSTILE
from tests.engines.parity_run import ROOT, run_parity, script_impl
from tests.engines.test_hostile_answers import LiveMarkup, ref

MODELS = "qwen3-vocab,tiny-qwen2-f32"
STAGES = "split,encode,decode,render,sample"
# Control characters never raw in any output (tab, newline and carriage return aside).
RAW_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What a report file may be called: nothing an engine chose can add a control or a separator.
FILE_NAME = re.compile(r"[A-Za-z0-9._-]+")


def specgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specgate", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def assert_markdown_inert(md: str, where: str) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    assert not RAW_CONTROLS.search(md), f"{where}: raw control {RAW_CONTROLS.search(md).group()!r}"
    live = LiveMarkup(markdown_it.MarkdownIt("commonmark").enable("table").render(md))
    assert not {"details", "summary"} & live.tags, f"{where}: live HTML {live.tags}"
    assert set(live.images) <= {"parity matrix"}, f"{where}: images {live.images}"
    assert not live.comments, f"{where}: live comments {live.comments}"
    # the text may be quoted inside a report's own heading, but makes none of its own
    assert not any(h.strip().startswith("FAKE") for h in live.headings), (
        f"{where}: live headings {live.headings}"
    )


class Elements(HTMLParser):
    """Every element and comment of an HTML page, as a browser's tokenizer sees them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.comments: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def assert_html_inert(page: str, where: str) -> None:
    assert not RAW_CONTROLS.search(page), f"{where}: raw control {RAW_CONTROLS.search(page).group()!r}"
    parsed = Elements(page)
    assert not parsed.comments, f"{where}: comments {parsed.comments[:3]}"
    injected = [(t, a) for t, a in parsed.elements if t == "img" or "onerror" in a or "open" in a]
    assert not injected, f"{where}: injected elements {injected[:3]}"
    assert "FAKE: all 999" in page  # the text is there, as text


def assert_junit_inert(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not RAW_CONTROLS.search(text), f"{path.name}: raw control {RAW_CONTROLS.search(text).group()!r}"
    root = ET.fromstring(text.encode("utf-8"))  # well-formed XML, or this raises
    assert root.iter("testcase"), path.name


def assert_png_inert(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as picture:
        chunks = dict(picture.text)
    for key, value in chunks.items():
        assert not RAW_CONTROLS.search(value), f"{path.name}: raw control in its {key} chunk"


@pytest.mark.slow  # a parity run of every stage on two models (~10 s); test_hostile_answers' inert test is fast
def test_a_hostile_handshake_and_answers_are_inert_in_every_report_and_output(tmp_path: Path) -> None:
    ref("qwen3-vocab")
    ref("tiny-qwen2-f32")
    impl = script_impl(Path(__file__).with_name("hostile_engine.py"), "hostile-handshake")
    run = run_parity(
        tmp_path,
        impl,
        STAGES,
        MODELS,
        "--max-cases",
        "2",
        "--shrink-budget",
        "10",
        "--parity-junit",
    )
    assert run.status == 1, run.output[-3000:]
    assert "Traceback" not in run.output and "INTERNALERROR" not in run.output, run.output[-3000:]
    assert not RAW_CONTROLS.search(run.output), f"terminal: {RAW_CONTROLS.search(run.output).group()!r}"
    reports = tmp_path / "reports"
    (json_path,) = reports.glob("parity-*.json")
    assert "FAKE" in json.dumps(json.loads(json_path.read_text(encoding="utf-8"))["provenance"])
    (md_path,) = reports.glob("parity-*.md")
    assert_markdown_inert(md_path.read_text(encoding="utf-8"), md_path.name)
    assert_html_inert(next(reports.glob("parity-*.html")).read_text(encoding="utf-8"), "run HTML")
    assert_junit_inert(next(reports.glob("parity-*.xml")))
    for png in reports.glob("*.png"):
        assert_png_inert(png)

    merged_dir = tmp_path / "merged"
    merged = specgate("report", "merge", str(json_path), "--out", str(merged_dir))
    assert merged.returncode == 1, merged.stdout + merged.stderr
    merge_output = merged.stdout + merged.stderr
    assert "Traceback" not in merge_output and not RAW_CONTROLS.search(merge_output), merge_output[-3000:]
    (merged_md,) = merged_dir.glob("parity-*.md")
    assert_markdown_inert(merged_md.read_text(encoding="utf-8"), "merged Markdown")
    assert_html_inert(next(merged_dir.glob("parity-*.html")).read_text(encoding="utf-8"), "merged HTML")
    assert_junit_inert(next(merged_dir.glob("parity-*.xml")))
    for png in merged_dir.glob("*.png"):
        assert_png_inert(png)

    summary = specgate("report", "summary", str(md_path))
    assert summary.returncode == 0, summary.stderr
    assert_markdown_inert(summary.stdout, "report summary")

    diff_md = tmp_path / "diff.md"
    diff = specgate("report", "diff", str(json_path), str(json_path), "--markdown", str(diff_md))
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert_markdown_inert(diff.stdout, "report diff")
    assert_markdown_inert(diff_md.read_text(encoding="utf-8"), "report diff --markdown")

    reproducers = sorted(reports.rglob("*.json"))
    reproducers.remove(json_path)
    assert reproducers, "the run left no reproducer to replay"
    for reproducer in reproducers:
        replayed = specgate("repro", str(reproducer), "--impl", impl)
        out = replayed.stdout + replayed.stderr
        assert replayed.returncode in (0, 1), out[-3000:]
        assert "Traceback" not in out and not RAW_CONTROLS.search(out), f"repro: {out[-3000:]!r}"

    for path in [*reports.rglob("*"), *merged_dir.rglob("*")]:
        assert FILE_NAME.fullmatch(path.name), f"file name {path.name!r}"


def test_the_escaping_path_of_each_format_holds_the_hostile_text() -> None:
    """Each format's one function, on the text itself: nothing live, nothing raw."""
    from specgate.safe_io import text_safety

    text = HOSTILE + "\x00$\\frac{1}{$"
    assert_markdown_inert("# report\n\n" + text_safety.md_text(text) + "\n", "md_text")
    assert_markdown_inert("\n".join(text_safety.md_fence(text)) + "\n", "md_fence")
    assert_markdown_inert(text_safety.md_inline(text) + "\n", "md_inline")
    assert_html_inert(f"<p>{text_safety.html_text(text)}</p>", "html_text")
    xml = f'<a b="{text_safety.html_text(text)}">{text_safety.html_text(text)}</a>'
    assert not RAW_CONTROLS.search(text_safety.xml_text(text))
    ET.fromstring(xml.encode("utf-8"))
    assert not RAW_CONTROLS.search(text_safety.terminal(text))
    shown = text_safety.png_text(text)
    assert shown.isascii() and shown.isprintable(), shown  # the PNG's font draws ASCII: the rest as escapes

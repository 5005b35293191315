"""Whatever an engine answers, the run ends with a report, the right outcome and
bounded memory (``impl.bounds``, ``specgate.safe_io.text_safety``; issue 25's red-team).

Each hostile engine is a real process (``hostile_engine.py`` over ``cmd:``) or a
fake llama.cpp server on loopback; whole runs go through ``specgate/gates`` in a
subprocess whose peak resident size the kernel measures (``peak_rss.py``).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from impl.http.engine import HttpEngine
from impl.process.client import CmdEngine
from impl.protocol import EngineError, ModelRef
from specgate.plugin import model_missing, setup_missing
from specgate.reports import html as report_html
from specgate.supply import models as model_cache
from tests.engines.loopback import JsonHandler, serving
from tests.engines.parity_run import ParityRun, run_parity, script_impl

HOSTILE = Path(__file__).resolve().parent / "hostile_engine.py"
MIB = 1 << 20
GB = 1 << 30
# The bound: a run's peak stays under 2 GB above its baseline whatever the
# engine answers. Asserted on the whole peak (baseline included: ~0.2 GB).
PEAK_BOUND = 2 * GB
# The JSON report grows with the number of cases, not with what an engine says: a
# case's record holds at most ``impl.bounds``' record_chars (8,000) of message.
REPORT_BYTES_PER_CASE = 32 * 1024
RENDER_MODEL = "qwen2.5-coder-0.5b-instruct"
LOGITS_MODEL = "tiny-qwen2-f32"
VOCAB_MODEL = "qwen3-vocab"


def ref(model_id: str) -> ModelRef:
    try:
        return model_cache.model_ref(model_id)
    except model_cache.ModelError as exc:
        model_missing(str(exc))
        raise


def hostile(mode: str, size: int = 0) -> str:
    return script_impl(HOSTILE, mode, str(size))


def assert_bounded_run(run: ParityRun, cases: int) -> None:
    """A report, exit 1, every case an error, memory and report size bounded."""
    assert run.status == 1, run.output[-3000:]
    assert run.report["cases"], f"no report: {run.output[-3000:]}"
    counts = run.outcomes()
    counts.pop("n/a", None)  # a conformance class the engine does not claim
    assert counts == {"error": cases}, counts
    assert run.peak_bytes is not None and run.peak_bytes < PEAK_BOUND, f"peak {run.peak_bytes / GB:.2f} GB"
    assert run.report_bytes < REPORT_BYTES_PER_CASE * cases + 256 * 1024, f"{run.report_bytes:,} bytes"
    print(f"peak {run.peak_bytes / MIB:.0f} MiB, JSON report {run.report_bytes:,} bytes for {cases} cases")


# --- the three high cases --------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "cases"),
    [pytest.param(20 * MIB, 9, id="20MB-x9", marks=pytest.mark.slow), pytest.param(5 * MIB, 8, id="5MB-x8")],
)
def test_huge_render_answers_through_cmd_end_in_a_report(tmp_path: Path, size: int, cases: int) -> None:
    """main: 20 MB x 9 took pytest to 7.7 GB and INTERNALERROR (exit 3), no report;
    5 MB x 8: 2.6 GB and a 157 MB JSON report. Now: every case an error naming the
    field and its size (over the reference's output bound, or over 4x the
    reference's prompt), exit 1, a small report."""
    ref(RENDER_MODEL)
    run = run_parity(
        tmp_path, hostile("big-render", size), "render", RENDER_MODEL, "--max-cases", str(cases),
        "--shrink-budget", "0", measure=True, timeout=600,
    )  # fmt: skip
    assert len(run.report["cases"]) == 2 * cases  # the model's conversations and the constructs
    assert_bounded_run(run, 2 * cases)
    for case in run.report["cases"]:
        assert re.search(r"answer field (result|prompt|output) is [\d,]+ characters", case["message"]), case[
            "message"
        ][:300]
        assert len(case["message"]) < 2000


class FakeLlamaServer(JsonHandler):
    """llama.cpp's server as far as the probe and the answers under test go."""

    def do_GET(self) -> None:
        if self.path == "/props":
            self.send_json(b"{}")
        else:
            self.send_json(b'{"error": "no"}', 404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        answer = self.server.answers.get(self.path)  # type: ignore[attr-defined]
        if answer is None:
            self.send_json(b'{"error": "no"}', 404)
        else:
            self.send_json(answer)


def fake_server(answers: dict[str, bytes]) -> contextlib.AbstractContextManager[str]:
    return serving(FakeLlamaServer, answers=answers)


def test_a_20mb_apply_template_answer_through_http_ends_in_a_report(tmp_path: Path) -> None:
    """main: one 20 MB /apply-template answer took 2.1 GB and wrote a 140 MB JSON."""
    ref(RENDER_MODEL)
    body = json.dumps({"prompt": "<|im_start|>" + "x" * (20 * MIB)}).encode()
    with fake_server({"/apply-template": body}) as url:
        run = run_parity(
            tmp_path, f"http:{url}", "render", RENDER_MODEL, "--max-cases", "3",
            "--shrink-budget", "0", measure=True, timeout=600,
        )  # fmt: skip
    rendered = [c for c in run.report["cases"] if c["outcome"] == "error"]
    assert run.status == 1 and rendered, run.output[-3000:]
    assert run.peak_bytes is not None and run.peak_bytes < PEAK_BOUND, f"peak {run.peak_bytes / GB:.2f} GB"
    assert run.report_bytes < REPORT_BYTES_PER_CASE * len(run.report["cases"]) + 256 * 1024
    for case in rendered:
        assert "answer field prompt is 20,971,532 characters" in case["message"], case["message"][:300]
    print(f"peak {run.peak_bytes / MIB:.0f} MiB, JSON report {run.report_bytes:,} bytes")


def test_a_declared_n_vocab_of_ten_million_is_an_error_before_allocating(tmp_path: Path) -> None:
    """main: a ~1 KB answer declaring n_vocab 10^7 allocated rows x 10^7 float64 (6.2 GB)
    and ended as a MemoryError recorded as the engine's fail."""
    ref(LOGITS_MODEL)
    run = run_parity(
        tmp_path, hostile("n-vocab", 10**7), "logits", LOGITS_MODEL, "--max-cases", "3",
        "--shrink-budget", "0", measure=True, timeout=600,
    )  # fmt: skip
    gated = [c for c in run.report["cases"] if c["outcome"] != "n/a"]
    assert_bounded_run(run, len(gated))
    for case in gated:
        assert "answer field top_k.n_vocab is 10,000,000; the model's n_vocab is" in case["message"], case[
            "message"
        ][:300]


# --- shapes checked before use ------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "size", "named"),
    [
        ("width", 3, r"answer field logits has width 3; the model's n_vocab is"),
        ("width", 0, r"answer field logits has width 0"),
        ("nan", 0, r"top_k logits and lse must be finite"),
        ("n-vocab", 10**7, r"answer field top_k.n_vocab is 10,000,000"),
    ],
)
def test_misshapen_logits_are_errors_naming_the_field(mode: str, size: int, named: str) -> None:
    """main: width 3 or 0 gave IndexError/ValueError tracebacks recorded as fail (or a
    wrong-width array handed to the checks), NaN was judged fail, n_vocab 10^7
    allocated its rows."""
    model = ref(LOGITS_MODEL)
    engine = CmdEngine(hostile(mode, size).removeprefix("cmd:"))
    try:
        with pytest.raises(EngineError, match=named):
            engine.logits(model, [1, 2, 3])
    finally:
        engine.close()


def test_misshapen_logits_in_a_run_are_errors_not_fails(tmp_path: Path) -> None:
    ref(LOGITS_MODEL)
    run = run_parity(
        tmp_path, hostile("width", 3), "logits", LOGITS_MODEL, "--max-cases", "2", "--shrink-budget", "0"
    )
    gated = [c for c in run.report["cases"] if c["outcome"] != "n/a"]
    assert run.status == 1 and gated and all(c["outcome"] == "error" for c in gated), run.outcomes()
    assert all("width 3" in c["message"] and "Traceback" not in c["message"] for c in gated)


def test_negative_and_overlarge_ids_from_a_server_are_errors() -> None:
    """main: a log-prob for id -1 landed on the last id (``row[-1]``), silently."""
    model = ref(LOGITS_MODEL)
    for token in (-1, 10**6):
        probs = [{"id": token, "logprob": -0.1}, {"id": 5, "logprob": -3.0}]
        body = json.dumps({"completion_probabilities": [{"top_logprobs": probs}]}).encode()
        with fake_server({"/completion": body}) as url:
            engine = HttpEngine(url)
            with pytest.raises(EngineError, match=rf"top_logprobs\[0\] id\[0\] = {token} is not a token id"):
                engine.logits(model, [1])
    tokens = json.dumps({"tokens": [3, -2]}).encode()
    with (
        fake_server({"/tokenize": tokens}) as url,
        pytest.raises(EngineError, match=r"tokens\[1\] = -2 is not"),
    ):
        HttpEngine(url).encode(model, "ab", parse_special=False)


def test_a_deeply_nested_handshake_is_one_did_not_start_line(tmp_path: Path) -> None:
    """main: a 200,000-deep handshake made every case a RecursionError *fail*. Now the
    engine did not start: one line, exit 1, no traceback."""
    ref(VOCAB_MODEL)
    run = run_parity(
        tmp_path, hostile("deep-handshake", 200_000), "encode", VOCAB_MODEL, "--max-cases", "3",
        "--shrink-budget", "0",
    )  # fmt: skip
    lines = [line for line in run.output.splitlines() if "did not start" in line]
    assert run.status == 1 and len(lines) == 1, run.output[-3000:]
    assert "malformed handshake line" in lines[0] and "maximum recursion depth" in lines[0], lines[0][:500]
    assert "Traceback" not in run.output and "RecursionError" not in run.output, run.output[-3000:]


def test_a_huge_encode_answer_is_refused_at_its_line_bound_within_the_deadline() -> None:
    """main: the deadline covered reading the line, not validating it (10^7 ids: ~80 s
    with SPECGATE_CMD_TIMEOUT=60; 10^6 here: seconds, then accepted). Now the line
    of an encode answer is bounded by the text's length and refused at once."""
    model = ref(VOCAB_MODEL)
    # The deadline out of reach (however busy the machine): the line bound must cut it.
    engine = CmdEngine(hostile("big-encode", 10**6).removeprefix("cmd:"), timeout=600)
    try:
        with pytest.raises(
            EngineError, match=r"is a line longer than \d+ bytes, the most this request can need"
        ):
            engine.encode(model, "abc", parse_special=False)
    finally:
        engine.close()


@pytest.mark.slow
def test_validating_an_answer_counts_against_the_request_deadline() -> None:
    """main: the deadline covered reading the line only; jsonschema then spent ~8 µs
    an item past it. 10^6 ids for a 10^6-byte text fit the line bound but take
    seconds to validate: with a 1 s deadline that is a hang, an error, not a result.
    On a busy machine the line itself may arrive after the deadline: either way the
    answer is refused at the deadline (which of the two, reading or validating, ran out
    depends on the machine's load, so both are the bound holding)."""
    model = ref(VOCAB_MODEL)
    engine = CmdEngine(hostile("big-encode", 10**6).removeprefix("cmd:"), timeout=1)
    engine.capabilities  # noqa: B018 — started (and said hello) outside the deadline under test
    try:
        with pytest.raises(
            EngineError, match=r"(was not read and validated|no answer to request \d+ \(encode\)) within 1 s"
        ):
            engine.encode(model, "a" * 10**6, parse_special=False)
    finally:
        engine.close()


def test_an_engine_message_is_cut_with_a_visible_marker() -> None:
    """main: an engine's error message was kept whole (and then stored, grouped, printed)."""
    model = ref(VOCAB_MODEL)
    engine = CmdEngine(hostile("big-message", 512 * 1024).removeprefix("cmd:"))
    try:
        with pytest.raises(EngineError) as caught:
            engine.encode(model, "abc", parse_special=False)
    finally:
        engine.close()
    message = str(caught.value)
    assert len(message) < 3000 and "head m" in message and message.endswith("m tail"), message[:300]
    assert re.search(r"… \[[\d,]+ characters cut\] …", message), message[:300]


# --- text inert in every report -------------------------------------------------------------


def test_engine_text_is_inert_in_markdown_html_and_the_terminal(tmp_path: Path) -> None:
    """main: a fence in a message closed the report's fence, so ``## FAKE: all 999 cases
    passed``, ``<details>``, ``<img>`` and ``<!--`` became live in the .md the README
    pipes into $GITHUB_STEP_SUMMARY; raw ANSI escapes reached the terminal."""
    markdown_it = pytest.importorskip("markdown_it")
    ref(VOCAB_MODEL)
    run = run_parity(
        tmp_path, hostile("markup"), "encode,render", VOCAB_MODEL, "--max-cases", "2", "--shrink-budget", "0"
    )
    assert run.status == 1, run.output[-2000:]
    md_path = next((tmp_path / "reports").glob("parity-*.md"))
    md = md_path.read_text(encoding="utf-8")
    assert "FAKE: all 999 cases passed" in md  # the text is there, as text
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    live = LiveMarkup(html)
    assert not {"details", "summary"} & live.tags, live.tags
    assert live.images == ["parity matrix"], live.images  # the report's own picture only
    assert not live.comments and not any("FAKE" in h for h in live.headings), (live.comments, live.headings)
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in md and raw not in run.output, f"{raw!r} reached the report or the terminal"
        page = next((tmp_path / "reports").glob("parity-*.html")).read_text(encoding="utf-8")
        assert raw not in page
    assert "\\x1b[31mRED" in md  # shown as an escape


class LiveMarkup(HTMLParser):
    """The elements a Markdown renderer made of a report: tags, images, comments, headings."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.images: list[str] = []
        self.comments: list[str] = []
        self.headings: list[str] = []
        self._heading = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._heading = tag in ("h1", "h2", "h3")
        if tag == "img":
            self.images.append(dict(attrs).get("alt") or "")
        if self._heading:
            self.headings.append("")

    def handle_endtag(self, tag: str) -> None:
        self._heading = False

    def handle_data(self, data: str) -> None:
        if self._heading:
            self.headings[-1] += data

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def test_inline_code_and_fences_hold_any_backticks() -> None:
    from specgate.safe_io.text_safety import md_fence, md_inline

    markdown_it = pytest.importorskip("markdown_it")
    text = "a ``` b ```` c `d` <img src=x>"
    html = (
        markdown_it.MarkdownIt("commonmark")
        .enable("table")
        .render("x " + md_inline(text) + " y\n\n" + "\n".join(md_fence(text)))
    )
    assert html.count("<code") == 2 and "<img" not in html
    assert html.count("&lt;img src=x&gt;") == 2


def test_a_malformed_page_link_leaves_the_filters_working(tmp_path: Path) -> None:
    """main: ``#stage=%E0%A4%A`` threw in decodeURIComponent and left the filters dead.
    The page's own script runs in node with a minimal DOM."""
    node = shutil.which("node")
    if node is None:
        setup_missing("no node to run the page's script", "install Node.js (the machine's node 20)")
    payload = {
        "impl": "x",
        "coverage": {"pass": 1, "fail": 1},
        "verdict": [],
        "matrix": [
            {"stage": s, "model": "m", **{o: int(o == "pass") for o in report_html.OUTCOMES}, "metrics": {}}
            for s in ("encode", "render")
        ],
        "groups": [],
        "cases": [],
    }
    page = report_html.page(payload)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    harness = tmp_path / "run.js"
    harness.write_text(
        """
const selects = {};
function select(name, values) { return selects['f-' + name] = {value: '', options: values.map(v => ({value: v})),
  addEventListener() {}}; }
select('stage', ['', 'encode', 'render']); select('model', ['', 'm']); select('outcome', ['', 'pass', 'fail']);
const fails = {encode: '1', render: '0'};
const rows = ['encode', 'render'].map(s => ({dataset: {stage: s, model: 'm'}, hidden: false,
  querySelector: q => ({textContent: q.includes('"fail"') ? fails[s] : '1'})}));
const shown = {textContent: ''};
let ready = null;
global.location = {hash: process.argv[2], pathname: '/r.html'};
global.history = {replaceState() {}};
global.document = {
  getElementById: id => id === 'shown' ? shown : selects[id] || null,
  querySelectorAll: q => q.includes('select') ? Object.values(selects) : q === 'tr.row' ? rows : [],
  addEventListener: (_, f) => { ready = f; },
};
"""
        + script
        + """
ready();
console.log(JSON.stringify({stage: selects['f-stage'].value, outcome: selects['f-outcome'].value,
  hidden: rows.map(r => r.hidden), shown: shown.textContent}));
""",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [node, str(harness), "#stage=%E0%A4%A&outcome=fail&model=%ZZ&junk&=x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    state = json.loads(proc.stdout)
    assert state["outcome"] == "fail" and state["stage"] == "", state
    assert state["hidden"] == [False, True] and state["shown"].startswith("1 rows"), state  # the filters ran


def test_diffs_are_windowed_around_the_first_divergence() -> None:
    from specgate.outcomes.gate import text_diff

    reference = "line\n" * 1000 + "the end\n"
    engine = reference[:-8] + "THE END\n" + "y" * (5 * MIB)
    diff = text_diff(reference, engine)
    assert diff is not None and len(diff) < 5000, len(diff or "")
    assert "-the·end↵" in diff and "+THE·END↵" in diff

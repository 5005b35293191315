"""A server that crashes on one request (llama-cpp-python's does: an id beyond the
vocabulary in ``/extras/detokenize`` terminates it) is one death, not a hundred
"connection refused" errors: requests that meet a server which is gone are the
engine's deaths (``impl.protocol.EngineDied``), so the crash-loop rule cuts its row
short after a few, and the report names the death once. The server is a real process
on loopback (``dying_server.py``) that exits as the real one does."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from impl.process import lifeline
from specgate.plugin import model_missing
from specgate.run.crashloop import DEATHS_TO_CUT, NOT_ASKED
from specgate.supply import models as model_cache
from tests.engines.loopback import JsonHandler, serving
from tests.engines.parity_run import ROOT, run_parity

MODEL = "qwen3-vocab"


def test_a_server_that_crashes_is_cut_short_not_blamed_case_by_case(tmp_path: Path) -> None:
    try:
        gguf = model_cache.model_ref(MODEL).gguf
    except model_cache.ModelError as exc:
        model_missing(str(exc))
    server = lifeline.spawn(
        [sys.executable, str(Path(__file__).with_name("dying_server.py")), str(gguf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=None,
    )
    try:
        port = int(server.stdout.readline())
        run = run_parity(
            tmp_path, f"http:http://127.0.0.1:{port}", "decode", MODEL, "--shrink-budget", "0",
            "--diagnose-budget", "0", timeout=900,
        )  # fmt: skip
    finally:
        lifeline.stop_group(server, grace=5)
    assert run.status == 1, run.output[-3000:]
    cases = [c for c in run.report["cases"] if c["stage"] == "decode"]
    answered = [c for c in cases if c["outcome"] in ("pass", "fail", "refused")]
    assert answered, "the server answered the cases before the one that kills it"
    not_asked = [c for c in cases if c["outcome"] == "error" and c["message"].startswith(NOT_ASKED)]
    gone = [c for c in cases if "the server is gone" in c["message"] and c not in not_asked]
    assert 1 <= len(gone) <= DEATHS_TO_CUT, [c["message"] for c in gone]
    assert not_asked, "the rest of the row was cut short"
    assert not [c for c in cases if "Connection refused" in c["message"] and c not in gone + not_asked]
    # Every request timed out before the engine answered anything about the model: the
    # model is cut after its first deaths (a model it cannot serve), else the row's streak.
    assert "crash loop cut short" in run.output or "requests about this model" in run.output, run.output[
        -3000:
    ]


class Trickling(JsonHandler):
    """llama.cpp's server whose every POST answer trickles a byte every half second."""

    def do_GET(self) -> None:
        self.answer({"model_path": None})

    def do_POST(self) -> None:
        self.server.posts.append(self.path)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "100000")
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(120):  # a minute at most: the client cuts it long before
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)


@pytest.mark.slow  # a parity run waiting out a request deadline per case (~6 s); test_adapter_bounds' trickle tests are fast
def test_a_server_that_trickles_every_answer_is_cut_short(tmp_path: Path) -> None:
    """A request not answered in full within SPECGATE_HTTP_TIMEOUT is a death (issue 38):
    it used to wait the full deadline on every case of the row (20 of 20)."""
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")
    posted: list[str] = []
    with serving(Trickling, posts=posted) as url:
        run = run_parity(
            tmp_path, f"http:{url}", "encode", MODEL, "--max-cases", "20", "-p", "no:xdist",
            "--shrink-budget", "0", "--diagnose-budget", "0", env={"SPECGATE_HTTP_TIMEOUT": "2"},
            timeout=600,
        )  # fmt: skip
    posts = len(posted)
    cases = [c for c in run.report["cases"] if c["stage"] == "encode"]
    not_asked = [c for c in cases if c["message"].startswith(NOT_ASKED)]
    print(f"trickling server: {posts} requests asked, {len(not_asked)} cases not asked, exit {run.status}")
    assert run.status == 1, run.output[-3000:]
    assert posts <= DEATHS_TO_CUT, posts  # counted in requests, not seconds
    assert len(not_asked) >= len(cases) - DEATHS_TO_CUT - 1 > 0, [c["message"][:120] for c in cases]
    # Every request timed out before the engine answered anything about the model: the
    # model is cut after its first deaths (a model it cannot serve), else the row's streak.
    assert "crash loop cut short" in run.output or "requests about this model" in run.output, run.output[
        -3000:
    ]

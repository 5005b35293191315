"""A server that crashes on one request (llama-cpp-python's does: an id beyond the
vocabulary in ``/extras/detokenize`` terminates it) is one death, not a hundred
"connection refused" errors: requests that meet a server which is gone are the
engine's deaths (``impl.protocol.EngineDied``), so the crash-loop rule cuts its row
short after a few, and the report names the death once. The server is a real process
on loopback (``dying_server.py``) that exits as the real one does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from impl.process import lifeline
from specgate.plugin import model_missing
from specgate.run.crashloop import DEATHS_TO_CUT, NOT_ASKED
from specgate.supply import models as model_cache
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
    assert "crash loop cut short" in run.output

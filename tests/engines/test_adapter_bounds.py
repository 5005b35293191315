"""An engine cannot make us hold more than a bound, or wait past a deadline.

Each case runs the adapter in a child process (``bounded_client.py``) against a real
misbehaving peer — ``fault_engine.py`` as a subprocess, or an HTTP server on
loopback in this process — and reads the child's resident-memory high-water mark:
the run completes, the case is an ``error`` with a message naming the bound, and
the adapter's memory stays below 1 GB (and near the bound it enforces).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.http.engine import HttpEngine
from impl.http.transport import MAX_BODY_BYTES
from impl.process import lifeline
from impl.process.client import MAX_LINE_BYTES
from impl.protocol import EngineError
from tests.engines.loopback import JsonHandler, LlamaServerHandler, serving

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAULT_ENGINE = HERE / "fault_engine.py"
CLIENT = HERE / "bounded_client.py"
MIB = 1 << 20
GB = 10**9  # the target: the process running the adapter stays under 1 GB
# What the misbehaving peers send before giving up, where the old adapters had no
# bound: far past every bound enforced here, but finite, so that a regression costs
# this machine a few hundred MB more, not all of its memory.
PAST_EVERY_BOUND = 768 * MIB


def run_client(impl: str, calls: list[list[Any]], env: dict[str, str], timeout: float = 60) -> dict[str, Any]:
    """The adapter's outcomes and memory, measured in a process of its own."""
    plan = json.dumps({"impl": impl, "calls": calls})
    child_env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        proc = lifeline.run(
            [sys.executable, str(CLIENT), plan],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the adapter did not finish {calls} within {timeout} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["growth"] = report["hwm_after"] - report["hwm_before"]
    print(
        f"{impl[:60]}: {report['seconds']:.1f} s, peak RSS {report['hwm_after'] / MIB:.0f} MiB "
        f"({report['growth'] / MIB:+.0f} MiB over the idle client)"
    )
    return report


def fault_engine(fault: str, **settings: str) -> tuple[str, dict[str, str]]:
    command = "cmd:" + shlex.join([sys.executable, str(FAULT_ENGINE), "toy"])
    env = {"SPECGATE_FAULT": fault, "SPECGATE_FAULT_AT": "1", "SPECGATE_FAULT_ONCE": "", **settings}
    return command, env


def short(message: str) -> str:
    return message[:300] + (" …" if len(message) > 300 else "")


# --- cmd: stderr and stdout ------------------------------------------------------------


def test_stderr_without_newlines_is_kept_as_a_bounded_tail() -> None:
    """8 MiB of stderr per request, never a newline, then a crash: the 40 requests
    pass, the crash is an error quoting the engine's last words, and the client holds
    a few kB of it, not 320 MiB."""
    impl, env = fault_engine("flood-stderr", SPECGATE_FAULT_BYTES=str(8 * MIB))
    report = run_client(impl, [["encode", "a"]] * 40 + [["encode", "die"]], env)
    *answers, crash = report["results"]
    assert all(r == {"outcome": "ok", "value": [97]} for r in answers), answers[:2]
    assert crash["outcome"] == "error"
    assert "exit status 7" in crash["message"] and "toy: asked to die" in crash["message"], short(
        crash["message"]
    )
    assert crash["message_length"] < 16_000, (
        f"{crash['message_length']} characters: {short(crash['message'])}"
    )
    assert report["growth"] < 64 * MIB, f"the client grew by {report['growth'] / MIB:.0f} MiB"
    assert report["hwm_after"] < GB


def test_an_endless_stdout_line_is_an_error_at_the_line_bound(tmp_path: Path) -> None:
    """A line that never ends is cut at the most the request can need (an encode of one
    character: ids of one byte plus ``impl.bounds``' slack for the envelope, ~1 MiB;
    never more than SPECGATE_CMD_MAX_LINE_BYTES, default 256 MiB), well before the
    deadline; the engine is killed and the next request is answered by a fresh one."""
    impl, env = fault_engine(
        "endless-line",
        SPECGATE_FAULT_AT="2",
        SPECGATE_FAULT_ONCE=str(tmp_path / "fired"),
        SPECGATE_FAULT_BYTES=str(PAST_EVERY_BOUND),
        SPECGATE_CMD_TIMEOUT="300",  # out of reach: the line bound must cut it, however busy the machine
    )
    report = run_client(impl, [["encode", "a"], ["encode", "b"], ["encode", "c"]], env, timeout=600)
    first, cut, after = report["results"]
    assert first["outcome"] == "ok" and after == {"outcome": "ok", "value": [99]}
    assert cut["outcome"] == "error"
    bound = re.search(r"line longer than (\d+) bytes, the most this request can need", cut["message"])
    assert bound and int(bound.group(1)) <= 2 * MIB < MAX_LINE_BYTES, short(cut["message"])
    assert report["starts"] == 2
    assert report["seconds"] < 300, "cut at the line bound, not at the deadline"
    assert report["growth"] < 64 * MIB, f"the client grew by {report['growth'] / MIB:.0f} MiB"
    assert report["hwm_after"] < GB


#: What a bomb inside the size bounds weighs: its parsed lists cost ~60 times as much.
BOMB = 20 * MIB


def test_an_answer_of_empty_lists_is_refused_before_it_is_parsed() -> None:
    """A logits answer of 20 MB of ``[],[],…`` (inside the line bound of a 12-id request)
    is refused on its count of JSON values, before ``json.loads`` builds ~7 M lists (issue
    38: 60 MB of them peaked at 3.68 GB); the client holds the line, not its lists."""
    impl, env = fault_engine("bracket-bomb", SPECGATE_FAULT_BYTES=str(BOMB), SPECGATE_CMD_TIMEOUT="300")
    report = run_client(impl, [["logits", 12]], env, timeout=300)
    [bomb] = report["results"]
    assert bomb["outcome"] == "error", bomb
    assert re.search(r"answer holds [\d,]+ JSON values or more, over the bound of", bomb["message"]), short(
        bomb["message"]
    )
    assert report["growth"] < 4 * BOMB + 64 * MIB, f"the client grew by {report['growth'] / MIB:.0f} MiB"


class TokenBomb(LlamaServerHandler):
    """llama.cpp's server whose /tokenize answers 20 MB of ids for any text."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))  # unread, closing resets the connection
        self.send_json(b'{"tokens": [' + b"1," * (BOMB // 2) + b"1]}")


def test_an_http_answer_of_more_ids_than_bytes_is_refused_before_it_is_parsed() -> None:
    """/tokenize of one character answered with 10 M ids (a 20 MB body, inside the 64 MiB
    body bound) is refused on its count of JSON values (issue 38: 63 MB peaked at 1.97 GB)."""
    with serving(TokenBomb) as url:
        report = run_client(f"http:{url}", [["encode", "a"]], {}, timeout=300)
    [bomb] = report["results"]
    assert bomb["outcome"] == "error", bomb
    assert "/tokenize: answer holds" in bomb["message"] and "JSON values" in bomb["message"], short(
        bomb["message"]
    )
    assert report["growth"] < 4 * BOMB + 64 * MIB, f"the client grew by {report['growth'] / MIB:.0f} MiB"


# --- http: body size and the whole request's time -------------------------------------


class Misbehaving(JsonHandler):
    """Routes by the first path segment: how the answer misbehaves."""

    def do_GET(self) -> None:
        mode = self.path.strip("/").split("/")[0]
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client hung up, as it should
            getattr(self, "answer_" + mode.replace("-", "_"))()

    def answer_endless(self) -> None:
        self._endless({})

    def answer_declared_huge(self) -> None:
        self._endless({"Content-Length": str(10 * 1024**3)})

    def _endless(self, headers: dict[str, str]) -> None:
        self.send_response(200)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        chunk = b"x" * MIB
        for _ in range(PAST_EVERY_BOUND // MIB):
            self.wfile.write(chunk)

    def answer_trickle_body(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self._trickle(b"{" + b" " * 999)

    def answer_trickle_headers(self) -> None:
        self._trickle(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}")

    def _trickle(self, data: bytes) -> None:
        """One byte every 2 s: each socket read succeeds long before a read timeout."""
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(2)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(Misbehaving) as url:
        yield url


@pytest.mark.parametrize("mode", ["endless", "declared-huge"])
def test_an_endless_body_is_an_error_at_the_body_bound(server: str, mode: str) -> None:
    report = run_client(f"http:{server}/{mode}", [["probe"]], {})
    [probe] = report["results"]
    assert probe["outcome"] == "error"
    assert f"body larger than {MAX_BODY_BYTES} bytes (SPECGATE_HTTP_MAX_BODY_BYTES)" in probe["message"], (
        short(probe["message"])
    )
    assert report["growth"] < MAX_BODY_BYTES + 64 * MIB, (
        f"the client grew by {report['growth'] / MIB:.0f} MiB"
    )
    assert report["hwm_after"] < GB


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers"])
def test_a_trickling_server_times_out_at_the_request_deadline(server: str, mode: str) -> None:
    report = run_client(f"http:{server}/{mode}", [["probe"]], {"SPECGATE_HTTP_TIMEOUT": "3"}, timeout=120)
    [probe] = report["results"]
    assert probe["outcome"] == "error"
    assert "not answered in full within 3 s (SPECGATE_HTTP_TIMEOUT" in probe["message"], short(
        probe["message"]
    )
    # Not before the deadline; and far before the trickle ends (2 s a byte: 120 s of headers,
    # 2000 s of body) — a ceiling that holds on a saturated machine, not a quiet one's timing.
    assert 2.5 < report["seconds"] < 60


def test_http_settings_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_HTTP_TIMEOUT", "abc")
    with pytest.raises(EngineError, match=r"^SPECGATE_HTTP_TIMEOUT='abc' is not a number of seconds$"):
        HttpEngine("http://127.0.0.1:1")
    monkeypatch.setenv("SPECGATE_HTTP_TIMEOUT", "-1")
    with pytest.raises(EngineError, match="SPECGATE_HTTP_TIMEOUT='-1' must be a positive"):
        HttpEngine("http://127.0.0.1:1")
    monkeypatch.delenv("SPECGATE_HTTP_TIMEOUT")
    monkeypatch.setenv("SPECGATE_HTTP_MAX_BODY_BYTES", "64M")
    with pytest.raises(
        EngineError, match="SPECGATE_HTTP_MAX_BODY_BYTES='64M' must be a positive whole number"
    ):
        HttpEngine("http://127.0.0.1:1")


def test_unreachable_server_is_an_error_naming_the_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match=f"GET http://127.0.0.1:{port}/openapi.json failed: .*refused"):
        HttpEngine(f"http://127.0.0.1:{port}", timeout=5).capabilities  # noqa: B018

"""The HTTP client both server flavours share: one JSON request, answered in full
within a deadline and in a bounded number of bytes.

The deadline (``SPECGATE_HTTP_TIMEOUT``, default 60 s) is that of the whole request —
connecting, sending, headers and body — not of each socket read, so a server
trickling bytes cannot stretch it. A body larger than ``SPECGATE_HTTP_MAX_BODY_BYTES``
(default 64 MiB; the largest answer asked for, a 512-token prompt echoed with 64
log-probs per position, is ~1.5 MB of JSON) is refused as soon as it is known to be.
Connection failures, HTTP 5xx answers, expired deadlines and overlong bodies are
``EngineError``; a server that is gone or let the deadline pass is ``EngineDied``, the
death the crash-loop rule counts (``specgate.run.crashloop``), so a server that hangs
or trickles on every request has its row cut short instead of waiting out every case;
a 4xx answer is a ``ClientError`` the flavours may interpret (a missing endpoint while
probing). Requests go straight to the server named (no HTTP
proxy): gated servers are local or reachable directly.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any

from impl import bounds
from impl.envvars import env_count, env_seconds
from impl.protocol import EngineDied, EngineError

MAX_BODY_BYTES = 64 * 1024 * 1024
CHUNK = 1 << 16
NAME = "http"  # how errors name the adapter


#: What a request meets when the server process has ended: counted as the engine's
#: death (``impl.protocol.EngineDied``), so a crashed server's row is cut short after a
#: few requests instead of failing every later case with "connection refused".
GONE = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)


class ClientError(Exception):
    """The server answered HTTP 4xx."""

    def __init__(self, code: int, detail: str):
        super().__init__(code, detail)
        self.code, self.detail = code, detail


class HttpClient:
    def __init__(self, base_url: str, timeout: float | None = None):
        self.base_url = base_url.strip().rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise EngineError(f"http: {base_url!r} is not an http(s) URL; use --impl 'http:http://host:port'")
        self.timeout = timeout if timeout is not None else env_seconds("SPECGATE_HTTP_TIMEOUT", 60.0)
        self.max_body_bytes = env_count("SPECGATE_HTTP_MAX_BODY_BYTES", MAX_BODY_BYTES)

    def get(self, path: str) -> Any:
        """The parsed JSON answer; a 4xx answer raises ``ClientError``."""
        return self._http("GET", path)

    def post(self, path: str, body: dict[str, Any], most_items: int | None = None) -> Any:
        """The parsed JSON answer of at most ``most_items`` values (default
        ``impl.bounds.BOUNDS.http_items``); every failure, 4xx included, is an ``EngineError``."""
        try:
            return self._http("POST", path, body, most_items)
        except ClientError as exc:
            raise EngineError(f"{NAME}: POST {path} -> HTTP {exc.code}: {exc.detail}") from None

    def _http(
        self, method: str, path: str, body: dict[str, Any] | None = None, most_items: int | None = None
    ) -> Any:
        """One request, answered in full within ``self.timeout`` seconds and in at most
        ``self.max_body_bytes`` bytes, as parsed JSON."""
        where = f"{method} {self.base_url}{path}"
        deadline = time.monotonic() + self.timeout
        try:
            status, raw = self._exchange(method, path, body)
        except _Overlong as exc:
            raise EngineError(
                f"{NAME}: {where} answered a body larger than {exc.limit} bytes "
                f"(SPECGATE_HTTP_MAX_BODY_BYTES)"
            ) from None
        except _Expired:  # a server that hangs or trickles: counted like a death (crash loops)
            raise EngineDied(
                f"{NAME}: {where} was not answered in full within {self.timeout:g} s "
                f"(SPECGATE_HTTP_TIMEOUT, the deadline of the whole request)"
            ) from None
        except GONE as exc:  # the server closed the connection unanswered or refuses new ones
            raise EngineDied(
                f"{NAME}: {where} failed: {exc or type(exc).__name__} (the server is gone: "
                "it crashed or was stopped)"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(f"{NAME}: {where} failed: {exc or type(exc).__name__}") from None
        if status >= 400:
            detail = raw[:500].decode("utf-8", errors="replace")
            if status >= 500:
                raise EngineError(f"{NAME}: {method} {path} -> HTTP {status}: {detail}")
            raise ClientError(status, detail)
        try:
            text = raw.decode("utf-8")
            del raw
            # The values it holds, counted before they are parsed (each costs 30-250 bytes).
            bounds.check_json_items(
                text, most_items or bounds.BOUNDS.http_items, "what this request can need"
            )
            answer = json.loads(text)
        except EngineError as exc:
            raise EngineError(f"{NAME}: {method} {path}: {exc}") from None
        except (ValueError, RecursionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise EngineError(f"{NAME}: {method} {path} answered malformed JSON: {first[:200]}") from None
        if time.monotonic() > deadline:  # parsing counts against the whole request's deadline
            raise EngineDied(
                f"{NAME}: {where} was not answered and parsed within {self.timeout:g} s "
                f"(SPECGATE_HTTP_TIMEOUT, the deadline of the whole request)"
            )
        return answer

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, bytes]:
        """Status and body bytes. A timer cuts the connection at the deadline, so the
        whole exchange, however slowly the server answers, ends by then."""
        url = urllib.parse.urlsplit(self.base_url + path)
        target = url.path + (f"?{url.query}" if url.query else "")
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = kind(url.hostname or "", url.port, timeout=self.timeout)
        expired, connected = threading.Event(), []
        timer = threading.Timer(self.timeout, _cut, args=(connected, expired))
        timer.daemon = True
        timer.start()
        try:
            conn.connect()  # bounded by the socket timeout; the cut then covers the rest
            connected.append(conn.sock)  # the connection hands its socket to the response
            if expired.is_set():
                raise _Expired
            data = json.dumps(body).encode("utf-8") if body is not None else None
            conn.request(method, target, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.status, _read_bounded(response, self.max_body_bytes)
        except (OSError, http.client.HTTPException):
            if expired.is_set():
                raise _Expired from None
            raise
        finally:
            timer.cancel()
            conn.close()
        if expired.is_set():  # a body without a length ends where the cut ended it
            raise _Expired
        return answer


class _Overlong(Exception):
    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


class _Expired(Exception):
    """The whole-request deadline passed."""


def _cut(connected: list[socket.socket], expired: threading.Event) -> None:
    """End a connection at its deadline: a read or write in progress returns at once."""
    expired.set()
    for sock in connected:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _read_bounded(response: http.client.HTTPResponse, limit: int) -> bytes:
    """The body, refused (``_Overlong``) as soon as it is known to exceed ``limit``."""
    declared = response.getheader("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _Overlong(limit)
    parts, size = [], 0
    while chunk := response.read(min(CHUNK, limit + 1 - size)):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _Overlong(limit)
    return b"".join(parts)


#: Sampling settings of every greedy request both flavours send.
GREEDY = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}

"""Fake servers on loopback for the ``http:`` tests: a real ``ThreadingHTTPServer`` on
127.0.0.1, port chosen by the kernel.

* ``JsonHandler``: a quiet handler that answers JSON values;
* ``LlamaCppPythonHandler``: llama-cpp-python's server as far as the ``http:`` adapter's
  probe goes (``/openapi.json`` names the routes it serves, ``/v1/models`` the GGUF);
  a subclass answers the POSTed routes in ``post``;
* ``serving``: a handler served from a thread for the length of a ``with`` block.

Imported as ``tests.engines.loopback`` by the tests, and as ``loopback`` by the
sibling server scripts run as their own processes (their folder is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


class JsonHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and answers JSON."""

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, value: Any, status: int = 200) -> None:
        self.send_json(json.dumps(value).encode(), status)

    def send_json(self, data: bytes, status: int = 200) -> None:
        """``data`` as a JSON answer; a client that hung up meanwhile is not an error here."""
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(data)


class LlamaServerHandler(JsonHandler):
    """llama.cpp's server as far as ``GET /props`` goes: it answers ``props`` there (the
    tests set a wrong shape to see it refused), 404 elsewhere; POSTs are the test's."""

    props: ClassVar[Any] = {"model_path": None}

    def do_GET(self) -> None:
        if self.path == "/props":
            self.answer(self.props)
        else:
            self.send_error(404)


class LlamaCppPythonHandler(JsonHandler):
    """llama-cpp-python's server: ``paths`` are the routes its ``/openapi.json`` lists,
    ``model`` the id ``/v1/models`` names (the GGUF's path); a POST's JSON body goes to
    ``post(body)``, whose answer is sent back (None: the route is not served, a 404)."""

    paths: ClassVar[tuple[str, ...]] = ()
    model: ClassVar[str] = ""

    def do_GET(self) -> None:
        if self.path == "/openapi.json":
            self.answer({"paths": {path: {} for path in self.paths}})
        else:
            self.answer({"data": [{"id": self.model}]})

    def do_POST(self) -> None:
        answer = self.post(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        if answer is None:
            self.send_error(404)
        else:
            self.answer(answer)

    def post(self, body: dict[str, Any]) -> Any:
        return None


def listening(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server for ``handler`` bound to a free port of 127.0.0.1 (``server_address[1]``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    return server


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], **attributes: Any) -> Iterator[str]:
    """``handler`` served from a thread while the block runs: yields its base URL. The
    ``attributes`` are set on the server (a handler reads them as ``self.server.<name>``)."""
    server = listening(handler)
    for name, value in attributes.items():
        setattr(server, name, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

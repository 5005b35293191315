"""A llama-cpp-python-like server on loopback that dies as the real one does: its
``/extras/detokenize`` answers each id's piece, and an id beyond the vocabulary ends
the whole process (the real server's llama.cpp throws ``std::out_of_range`` there and
terminates). Prints its port on the first line of stdout.

    python dying_server.py GGUF
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from impl.http import vocab


def main() -> None:
    gguf = Path(sys.argv[1])
    pieces = vocab.pieces(gguf)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, value: object) -> None:
            data = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/openapi.json":
                self._answer(
                    {"paths": {"/extras/tokenize": {}, "/extras/detokenize": {}, "/v1/completions": {}}}
                )
            else:
                self._answer({"data": [{"id": str(gguf)}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if self.path != "/extras/detokenize":
                self.send_error(404)
                return
            ids = body["tokens"]
            if any(not 0 <= i < len(pieces) for i in ids):
                print(f"terminate: vector::_M_range_check: {max(ids)} >= {len(pieces)}", file=sys.stderr)
                os._exit(134)  # as std::terminate: the whole server is gone
            self._answer({"text": b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

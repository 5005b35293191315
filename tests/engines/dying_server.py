"""A llama-cpp-python-like server on loopback that dies as the real one does: its
``/extras/detokenize`` answers each id's piece, and an id beyond the vocabulary ends
the whole process (the real server's llama.cpp throws ``std::out_of_range`` there and
terminates). Prints its port on the first line of stdout.

    python dying_server.py GGUF
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from loopback import (  # the sibling module (this script's folder is on sys.path)
    LlamaCppPythonHandler,
    listening,
)

from impl.http import vocab


def main() -> None:
    gguf = Path(sys.argv[1])
    pieces = vocab.pieces(gguf)

    class Dying(LlamaCppPythonHandler):
        paths = ("/extras/tokenize", "/extras/detokenize", "/v1/completions")
        model = str(gguf)

        def post(self, body: dict[str, Any]) -> Any:
            if self.path != "/extras/detokenize":
                return None
            ids = body["tokens"]
            if any(not 0 <= i < len(pieces) for i in ids):
                print(f"terminate: vector::_M_range_check: {max(ids)} >= {len(pieces)}", file=sys.stderr)
                os._exit(134)  # as std::terminate: the whole server is gone
            return {"text": b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")}

    server = listening(Dying)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

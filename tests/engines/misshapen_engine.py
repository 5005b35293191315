"""An engine that answers two requests with results of the wrong shape, as a
third-party engine written against PROTOCOL.md might (it imports nothing from
specgate): ``encode`` of the text "strings" answers strings instead of ids, and
``generate`` leaves out ``finish_reason``. Everything else is well-formed.

    python tests/engines/misshapen_engine.py
"""

from __future__ import annotations

import json
import sys


def answer(request: dict) -> object:
    op = request["op"]
    if op == "encode":
        text = request["text"]
        return list(text) if text == "strings" else list(text.encode("utf-8"))
    if op == "generate":
        return {"ids": [1], "bytes": "61"}  # no finish_reason
    raise ValueError(f"unexpected op {op!r}")


def main() -> int:
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "misshapen",
        "version": "1",
        "capabilities": ["encode", "generate"],
    }
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            break
        print(json.dumps({"id": request["id"], "result": answer(request)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

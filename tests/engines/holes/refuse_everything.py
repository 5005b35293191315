"""Hole: an engine that declares the tokenizer stages and refuses every request.

Written as an engine author would, from PROTOCOL.md alone (no specgate import). A
refusal is never a pass: every row it declares has no passing case, and the run as
a whole has none — `nox -s parity` must exit non-zero saying so.

    python tests/engines/holes/refuse_everything.py
"""

import json
import sys

hello = {
    "protocol": "specgate-jsonl/1",
    "engine": "refuse-everything",
    "version": "0",
    "capabilities": ["split", "encode", "decode"],
}
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "shutdown":
        break
    error = {"type": "unsupported", "message": "this engine supports nothing"}
    print(json.dumps({"id": request["id"], "error": error}), flush=True)

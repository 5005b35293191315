"""Hole: an engine whose answers hold lone UTF-16 surrogates, as a JavaScript
engine slicing an emoji in half answers them (JSON can carry ``"\\ud83d"``; UTF-8
cannot). Its cases fail, and the run's reports must still be written and read back.

Written from PROTOCOL.md alone (no specgate import).

    python tests/engines/holes/half_surrogates.py
"""

import json
import sys

hello = {
    "protocol": "specgate-jsonl/1",
    "engine": "half-surrogates",
    "version": "0",
    "capabilities": ["split", "render"],
}
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "shutdown":
        break
    # Every answer is led by the first half of a surrogate pair: "\ud83d" on the wire.
    # (render and render_template: a prompt cut in the middle of an emoji)
    result = ["\ud83d" + request["text"]] if request["op"] == "split" else "<|im_start|>\ud83d"
    print(json.dumps({"id": request["id"], "result": result}), flush=True)

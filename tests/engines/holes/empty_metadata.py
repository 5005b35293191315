"""Hole: an engine that declares the metadata stage and answers ``{}``.

Written from PROTOCOL.md alone. Declaring a stage means answering it: every field
the gate compares is missing, so every case fails naming its field.

    python tests/engines/holes/empty_metadata.py
"""

import json
import sys

hello = {
    "protocol": "specgate-jsonl/1",
    "engine": "empty-metadata",
    "version": "0",
    "capabilities": ["metadata"],
}
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "shutdown":
        break
    print(json.dumps({"id": request["id"], "result": {}}), flush=True)

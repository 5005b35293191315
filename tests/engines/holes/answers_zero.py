"""Hole: an engine that answers ``[0]`` to every text it is asked to encode.

Written from PROTOCOL.md alone (no specgate import). Its answer matches no reference
on any case — the cases the references disagree on included — so every case fails
and nothing lands in the *disagree* column.

    python tests/engines/holes/answers_zero.py
"""

import json
import sys

hello = {"protocol": "specgate-jsonl/1", "engine": "answers-zero", "version": "0", "capabilities": ["encode"]}
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "shutdown":
        break
    print(json.dumps({"id": request["id"], "result": [0]}), flush=True)

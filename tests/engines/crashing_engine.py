"""A process engine that is broken the way real ones are, for the run's trust tests.

    python tests/engines/crashing_engine.py MODE

Standard library only: it speaks PROTOCOL.md by hand, as an engine in another language
would.

* ``loop``: loads for ``CRASHING_ENGINE_LOAD`` seconds (default 2), sends its
  handshake (encode only), then dies on every request the way a Rust engine panics:
  the panic line, its message, and a long backtrace after them on stderr, exit 101.
  With ``CRASHING_ENGINE_ANSWER_FIRST`` set, the run's first process (the first line of
  ``CRASHING_ENGINE_STARTS``) answers ``[1, 2, 3]`` to its first request before dying on
  the next: the model was answered about, so its deaths count per row.
* ``model``: loads, sends its handshake (split, encode, decode), then answers every
  request about any model but ``CRASHING_ENGINE_BAD_MODEL`` (a wrong answer within every
  bound: nothing) and dies like ``loop`` on the first request about that model
  (after ``CRASHING_ENGINE_MODEL_LOAD`` seconds of loading it, default 1): an engine
  that cannot load one model. ``CRASHING_ENGINE_REQUESTS``, when set, names a file each
  request appends its op and model to.
* ``alternate``: as ``loop``, but answers ``[1, 2, 3]`` to every other request (the
  first of each process's life) before dying on the next one: never three deaths in
  a row.
* ``hang-alternate``: as ``alternate``, but hangs (an hour) instead of dying: killed at
  ``SPECGATE_CMD_TIMEOUT`` on every other request.
* ``refuse``: answers every request with an ``unsupported`` error (it answers nothing).
* ``CRASHING_ENGINE_STARTS``, when set, names a file each start appends a line to (the
  tests count the processes started, a bound that does not depend on machine load).
* ``no-start``: prints ``FATAL: cannot mmap weights …`` (and a few log lines around it)
  to stderr and exits 3 before its handshake.
"""

from __future__ import annotations

import json
import os
import sys
import time

PANIC = "thread 'main' panicked at src/engine/forward.rs:412:9:"
MESSAGE = "index out of bounds: the len is 151936 but the index is 4294967295"
FATAL = "FATAL: cannot mmap weights /models/qwen.gguf: Cannot allocate memory (os error 12)"


def die_like_rust(request: int) -> None:
    err = sys.stderr
    err.write(f"[INFO] handling request {request}\n")
    err.write(PANIC + "\n" + MESSAGE + "\n")
    err.write("stack backtrace:\n")
    for frame in range(120):  # far more than any tail keeps: the panic scrolls out of it
        err.write(f"  {frame:3}: engine::forward::layer_{frame}::h{frame:016x}\n")
        err.write(f"             at ./src/engine/forward.rs:{400 + frame}:5\n")
    err.write("note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n")
    err.flush()
    os._exit(101)


def answer_or_die(request: dict, n: int) -> None:
    """``model`` mode: a wrong answer about a good model, a death loading the bad one."""
    model = (request.get("model") or {}).get("id")
    if os.environ.get("CRASHING_ENGINE_REQUESTS"):
        with open(os.environ["CRASHING_ENGINE_REQUESTS"], "a", encoding="utf-8") as log:
            log.write(f"{request.get('op')} {model}\n")
    if model == os.environ.get("CRASHING_ENGINE_BAD_MODEL"):
        sys.stderr.write(f"[INFO] loading {model}\n")
        sys.stderr.flush()
        time.sleep(float(os.environ.get("CRASHING_ENGINE_MODEL_LOAD", "1")))
        die_like_rust(n)
    answers = {"encode": [], "decode": {"$bytes": ""}, "split": []}  # wrong, but within every bound
    sys.stdout.write(json.dumps({"id": request["id"], "result": answers[request["op"]]}) + "\n")
    sys.stdout.flush()


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "loop"
    if os.environ.get("CRASHING_ENGINE_STARTS"):
        with open(os.environ["CRASHING_ENGINE_STARTS"], "a", encoding="utf-8") as starts:
            starts.write(f"{os.getpid()}\n")
    if mode == "no-start":
        sys.stderr.write("[INFO] crashing engine 1.0 starting\n[INFO] reading /models/qwen.gguf\n")
        sys.stderr.write(FATAL + "\n[INFO] shutting down\n")
        sys.stderr.flush()
        return 3
    first_process = False
    if os.environ.get("CRASHING_ENGINE_STARTS"):
        with open(os.environ["CRASHING_ENGINE_STARTS"], encoding="utf-8") as starts:
            first_process = starts.read().splitlines()[0] == str(os.getpid())
    time.sleep(float(os.environ.get("CRASHING_ENGINE_LOAD", "2")))
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "crashing",
        "version": "1.0",
        "capabilities": ["split", "encode", "decode"] if mode == "model" else ["encode"],
    }
    sys.stdout.write(json.dumps(hello) + "\n")
    sys.stdout.flush()
    for n, line in enumerate(sys.stdin, start=1):
        request = json.loads(line)
        if request.get("op") == "shutdown":
            return 0
        if mode == "refuse":
            error = {"type": "unsupported", "message": "not today"}
            sys.stdout.write(json.dumps({"id": request["id"], "error": error}) + "\n")
            sys.stdout.flush()
            continue
        if mode == "model":
            answer_or_die(request, n)
            continue
        if mode == "loop" and n == 1 and first_process and os.environ.get("CRASHING_ENGINE_ANSWER_FIRST"):
            sys.stdout.write(json.dumps({"id": request["id"], "result": [1, 2, 3]}) + "\n")
            sys.stdout.flush()
            continue
        if mode in ("alternate", "hang-alternate") and n % 2 == 1:
            sys.stdout.write(json.dumps({"id": request["id"], "result": [1, 2, 3]}) + "\n")
            sys.stdout.flush()
            continue
        if mode == "hang-alternate":
            time.sleep(3600)
        die_like_rust(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hand reproductions of llama-cpp-python server divergences, through its HTTP API alone.

    python confirm.py --model qwen2.5-coder-0.5b-instruct.gguf   (starts serve.py on a free port)
    python confirm.py --url http://127.0.0.1:PORT                (a server already serving that model)

Each divergence: the request, what the server answers, what llama.cpp gives in-process
through llama-cpp-python 0.3.36 (``Llama(..., vocab_only=True)``: ``tokenize`` and
``llama_token_to_piece`` with a buffer large enough for the piece) on the same GGUF —
literals below, obtained by running that reference. Exit 0 when every divergence still
reproduces, 1 otherwise; one line per divergence. Standalone: stdlib only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Token 2559 of the Qwen2.5 vocabulary is a run of 39 spaces (39 bytes > 32).
LONG_PIECE_IDS = [87, 284, 220, 16, 2559, 671, 2814]
# llama.cpp via llama-cpp-python 0.3.36: b"".join(llama_token_to_piece(vocab, i, buf[256], 0, True))
LONG_PIECE_REFERENCE = "x = 1" + " " * 40 + "# done"

SPECIAL_TEXT = "<|im_start|>user"
# llama.cpp via llama-cpp-python 0.3.36: Llama.tokenize(text, add_bos=False, special=False) — the
# text read as plain text, as HF tokenizers 0.23.3 also gives with split_special_tokens=True.
SPECIAL_TEXT_AS_TEXT = [27, 91, 318, 4906, 91, 29, 872]


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read().decode("utf-8"))


def detokenize_drops_long_pieces(url: str) -> tuple[bool, str]:
    got = post(url, "/extras/detokenize", {"tokens": LONG_PIECE_IDS})["text"]
    return got != LONG_PIECE_REFERENCE, (
        f"/extras/detokenize {LONG_PIECE_IDS}: server {got!r}, llama.cpp in-process {LONG_PIECE_REFERENCE!r} "
        f"(the 39-byte piece of token 2559 is dropped)"
    )


def tokenize_always_parses_specials(url: str) -> tuple[bool, str]:
    got = post(url, "/extras/tokenize", {"input": SPECIAL_TEXT})["tokens"]
    return got != SPECIAL_TEXT_AS_TEXT, (
        f"/extras/tokenize {SPECIAL_TEXT!r}: server {got} (specials parsed, no switch to turn it off), "
        f"llama.cpp in-process with special=False {SPECIAL_TEXT_AS_TEXT}"
    )


DIVERGENCES = [detokenize_drops_long_pieces, tokenize_always_parses_specials]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def started_server(model: str) -> Iterator[str]:
    port = free_port()
    argv = [
        sys.executable,
        str(HERE / "serve.py"),
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                sys.exit(f"confirm: the server exited ({proc.returncode}): {proc.stderr.read()[-800:]!r}")
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("confirm: the server did not come up within 180 s")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="the Qwen2.5-Coder-0.5B-Instruct GGUF (specgate models path ...)")
    where.add_argument("--url", help="a running llama-cpp-python server serving that model")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url.rstrip("/") if args.url else stack.enter_context(started_server(args.model))
        results = [check(url) for check in DIVERGENCES]
    for reproduced, line in results:
        print(("REPRODUCED  " if reproduced else "GONE        ") + line)
    return 0 if all(r for r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Hand reproductions of llama-cpp-python server divergences, through its HTTP API alone.

    python confirm.py --model qwen2.5-coder-0.5b-instruct.gguf   (starts serve.py on a free port)
    python confirm.py --url http://127.0.0.1:PORT                (a server already serving that model)

Each divergence: the request, what the server answers, what llama.cpp gives in-process
through llama-cpp-python 0.3.36 (``Llama(..., vocab_only=True)``: ``tokenize`` and
``llama_token_to_piece`` with a buffer large enough for the piece) on the same GGUF —
and, for log-probs, ``Llama(..., logits_all=True)``'s scores — literals below, obtained by
running that reference. Exit 0 when every divergence still
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
import tempfile
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


BEYOND_VOCABULARY = [999999]
# The reference of the decode case ids-edge-999999 (snapshots/qwen2.5-coder-0.5b-instruct/decode.json):
# an id outside the 151936-token vocabulary is skipped (PROTOCOL.md 4.2): no bytes.
BEYOND_VOCABULARY_REFERENCE = ""


def detokenize_beyond_vocabulary_kills_the_server(url: str) -> tuple[bool, str]:
    """Last of all: the server does not survive it."""
    try:
        got = repr(post(url, "/extras/detokenize", {"tokens": BEYOND_VOCABULARY})["text"])
    except (OSError, ValueError, KeyError) as exc:  # the connection closed unanswered, refused, a 500
        got = f"no answer ({type(exc).__name__}: {exc})"
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=10).read()
        except OSError as after:
            got += f"; afterwards the server is gone ({type(after).__name__})"
    return got != repr(BEYOND_VOCABULARY_REFERENCE), (
        f"/extras/detokenize {BEYOND_VOCABULARY} (an id outside the vocabulary): server {got}, "
        f"the reference skips it: {BEYOND_VOCABULARY_REFERENCE!r}"
    )


# The log-prob checks: llama.cpp via llama-cpp-python 0.3.36, Llama(gguf, n_ctx=512, logits_all=True),
# eval(ids) in one batch, log-softmax of scores in float64 (a server evaluates the prompt the same way;
# values agree to ~1e-6, the bound LOGPROB_TOL leaves room for a different CPU's kernels).
LOGPROB_TOL = 0.5
CHAT = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\nHi! How can I help you today?"
# After the final "?" (position 19), llama.cpp's top-40 holds two control tokens, both detokenized as "":
IM_END_LOGPROB = -0.0188  # <|im_end|> (151645), the top candidate
IM_START_LOGPROB = -11.4133  # <|im_start|> (151644), the other "" in the top-40
PROMPT = "def fib(n):\n    return"  # ids [750, 15801, 1445, 982, 262, 470]
# token 2, "(n" (1445): OpenAI's token_logprobs[2] is log P("(n" | "def fib") = the distribution after
# token 1 at 1445; the distribution after token 2 (which predicts token 3) gives 1445 a far lower value.
OPENAI_TOKEN_LOGPROB_2 = -0.3700
AFTER_TOKEN_LOGPROB_2 = -14.3201


def echo(url: str, prompt: str, logprobs: int) -> dict:
    body = {"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": logprobs, "temperature": 0.0}
    return post(url, "/v1/completions", body)["choices"][0]["logprobs"]


def candidate_names_collide(url: str) -> tuple[bool, str]:
    top = echo(url, CHAT, 40)["top_logprobs"][19]
    got = top.get("")
    reproduced = got is not None and abs(got - IM_START_LOGPROB) < LOGPROB_TOL < abs(got - IM_END_LOGPROB)
    return reproduced, (
        f'/v1/completions logprobs=40 echo, after {CHAT[-10:]!r}: the server\'s one "" candidate is {got}, '
        f"llama.cpp in-process has <|im_end|> at {IM_END_LOGPROB} and <|im_start|> at {IM_START_LOGPROB} "
        f'(candidates are named by text; every control token is "" and the later overwrites the first)'
    )


def echo_token_logprobs_one_position_off(url: str) -> tuple[bool, str]:
    got = echo(url, PROMPT, 1)["token_logprobs"][2]
    reproduced = got is not None and abs(got - AFTER_TOKEN_LOGPROB_2) < LOGPROB_TOL < abs(
        got - OPENAI_TOKEN_LOGPROB_2
    )
    return reproduced, (
        f"/v1/completions echo {PROMPT!r}: token_logprobs[2] (token '(n') is {got}; llama.cpp in-process: "
        f"log P('(n' | 'def fib') = {OPENAI_TOKEN_LOGPROB_2} (OpenAI's definition), {AFTER_TOKEN_LOGPROB_2} "
        f"under the distribution after '(n' itself (one position off)"
    )


DIVERGENCES = [
    detokenize_drops_long_pieces,
    tokenize_always_parses_specials,
    candidate_names_collide,
    echo_token_logprobs_one_position_off,
    detokenize_beyond_vocabulary_kills_the_server,  # last: it kills the server
]


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
    # stderr to a file: llama.cpp's load log outgrows a pipe's buffer, and a full pipe nobody reads
    # stalls the server before it listens
    log = tempfile.TemporaryFile()  # noqa: SIM115 — closed in the finally below, after the server
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                log.seek(0)
                sys.exit(f"confirm: the server exited ({proc.returncode}): {log.read()[-800:]!r}")
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
        log.close()


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

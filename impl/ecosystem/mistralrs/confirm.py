"""Hand reproductions of mistral.rs divergences the specgate gates found, with mistral.rs's
own public Python API only (no specgate, no adapter): `Runner(Which.GGUF(...))` with the
GGUF's own chat template, `detokenize_text`, and plain-text `CompletionRequest`s. Prints
one line per divergence; exit 0 when every one still reproduces, 1 when one no longer
does, 2 when the GGUF is missing.

    python impl/ecosystem/mistralrs/confirm.py [--model path/to/qwen2.5-coder-0.5b-instruct.gguf]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the local GGUF only
# mistral.rs logs to file descriptor 1: the verdict lines keep stdout, its logs go to stderr
sys.stdout = open(os.dup(1), "w", encoding="utf-8", buffering=1)  # noqa: SIM115 (the process's lifetime)
os.dup2(2, 1)
import mistralrs  # noqa: E402

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import attempt, report  # noqa: E402

DEFAULT_GGUF = (
    Path.home() / ".cache/specgate/models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct.gguf"
)
#: The prompt of a generate case (snapshots/qwen2.5-coder-0.5b-instruct/generate.json), as
#: the text of its ids (llama.cpp's pieces, control tokens written out).
RARE = "<|im_start|>user\nRepeat exactly: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ ꙮ<|im_end|>\n<|im_start|>assistant\n"  # 27 ids


def complete(
    runner: mistralrs.Runner, prompt: str, n_ids: int, max_tokens: int, stop: list[str] | None
) -> tuple[bytes, str]:
    """A greedy plain-text completion of ``prompt`` (``n_ids`` tokens): (its text as UTF-8, its
    finish reason). A failure or another prompt length ends the script (no reproduction)."""
    response = runner.send_completion_request(
        mistralrs.CompletionRequest(
            prompt=prompt,
            model="qwen2.5-coder",
            max_tokens=max_tokens,
            temperature=0.0,
            repetition_penalty=1.0,
            stop_seqs=stop,
        )
    )
    if response.usage.prompt_tokens != n_ids:
        raise SystemExit(f"the prompt {prompt!r} is {response.usage.prompt_tokens} tokens, not {n_ids}")
    choice = response.choices[0]
    return choice.text.encode("utf-8"), choice.finish_reason


def divergences(runner: mistralrs.Runner) -> list[tuple[str, Any, Any]]:
    """(what, mistral.rs's answer, the reference's answer) per divergence."""
    decode = lambda ids: attempt(lambda: runner.detokenize_text(ids, False).encode("utf-8"))  # noqa: E731
    return [
        (
            "decode answers U+FFFD for a piece ending inside a UTF-8 character: detokenize_text([9284])",
            decode([9284]),
            # llama.cpp's token_to_piece on this GGUF (snapshots/qwen2.5-coder-0.5b-instruct/
            # decode.json, case ids-partial-around-special: its first id)
            b"\xf0\x9f",
        ),
        (
            "decode answers U+FFFD around a special token: detokenize_text([9284, 151645, 104, 254])",
            decode([9284, 151645, 104, 254]),
            # llama.cpp's token_to_piece, case ids-partial-around-special
            b"\xf0\x9f<|im_end|>\xab\xa0",
        ),
        (
            "decode answers the [PAD] filler's text: detokenize_text([151935])",
            decode([151935]),
            # llama.cpp's token_to_piece of an UNUSED token (type 5) is empty, case ids-edge-last-id
            b"",
        ),
        (
            "decode answers the [PAD] filler's text: detokenize_text([151665])",
            decode([151665]),
            # llama.cpp, case ids-unused-first
            b"",
        ),
        (
            "a stop string completed by the last allowed token: max_tokens=15, stop '✓'",
            complete(runner, RARE, 27, 15, ["✓"]),
            # llama.cpp's greedy stream of 15 ids, '1. 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓', cut where '✓' starts, finished
            # by the stop string ("stop" in OpenAI's terms; generate.json, case
            # stop-after-split-character/rare-characters: the expected answer)
            ("1. 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ".encode(), "stop"),
        ),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_GGUF)
    args = parser.parse_args(argv)
    if not args.model.is_file():
        print(f"confirm mistral.rs: missing {args.model} (specgate models fetch qwen2.5-coder-0.5b-instruct)")
        return 2
    runner = mistralrs.Runner(
        which=mistralrs.Which.GGUF(
            quantized_model_id=str(args.model.parent), quantized_filename=args.model.name
        ),
        token_source="none",
    )
    sys.stdout.flush()
    return report(divergences(runner), "mistral.rs", "llama.cpp")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

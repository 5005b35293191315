"""Encode throughput of the oracle tokenizer next to HF tokenizers, llama.cpp and tiktoken.

A benchmark, not a test: run it on a quiet machine and read the ratios::

    python benchmarks/bench_tokenizer.py [--reps 5] [--size 200000]

The text is ~200 KB of mixed code and prose: Python standard-library sources
(code, comments, docstrings) interleaved with the tokenizer corpus (many scripts,
emoji, whitespace runs, digits). Each engine encodes the same text; every
repetition starts cold — a fresh HF tokenizer, an emptied oracle piece cache —
because all of them memoize pieces and a warm rerun would measure only the cache.
Engines run interleaved and the best of ``--reps`` counts; time is the process's
CPU time (every engine here encodes on one thread), so other jobs on a shared
machine do not distort the ratios. Ratios are oracle / other (>1 = oracle faster).

Vocabularies: oracle, HF and llama.cpp on qwen3-vocab (HF from its tokenizer.json,
which adds an NFC pass); oracle and tiktoken on qwen3.6-vocab (tiktoken's ranks).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STDLIB_SOURCES = (
    "argparse",
    "textwrap",
    "json.decoder",
    "difflib",
    "string",
    "shlex",
    "fractions",
    "calendar",
)


def mixed_text(size: int) -> str:
    import importlib

    corpus = [
        json.loads(line)["text"]
        for line in (ROOT / "corpus/texts/tokenizer.jsonl").read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]
    code = [
        Path(importlib.import_module(name).__file__).read_text(encoding="utf-8") for name in STDLIB_SOURCES
    ]
    parts: list[str] = []
    total, k = 0, 0
    while total < size:
        chunk = code[k % len(code)][(k // len(code)) * 8000 :][:8000] + "\n" + "\n".join(corpus[k::7]) + "\n"
        parts.append(chunk)
        total += len(chunk.encode("utf-8"))
        k += 1
    return "".join(parts).encode("utf-8")[:size].decode("utf-8", errors="ignore")


def best_of(reps: int, prepare: Callable[[], Callable[[], object]]) -> float:
    """Fastest of ``reps`` cold runs (``prepare`` builds a fresh runner outside the timing)."""
    best = float("inf")
    for _ in range(reps):
        run = prepare()
        gc.collect()
        t0 = time.process_time()
        run()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--size", type=int, default=200_000)
    args = parser.parse_args()

    from impl.llamacpp.engine import LlamaCppEngine
    from impl.text.engines import TiktokenEngine
    from oracle.tokenizer import Tokenizer
    from specgate.supply.models import model_ref

    text = mixed_text(args.size)
    mb = len(text.encode("utf-8")) / 1e6
    q3, q36 = model_ref("qwen3-vocab"), model_ref("qwen3.6-vocab")
    oracle3, oracle36 = Tokenizer.from_gguf(q3.gguf), Tokenizer.from_gguf(q36.gguf)
    llm = LlamaCppEngine().llama(q3, vocab_only=True)
    tiktoken = TiktokenEngine()._encoding(q36)

    def hf_runner() -> Callable[[], object]:
        from tokenizers import Tokenizer as HFTokenizer

        hf = HFTokenizer.from_file(str(q3.tokenizer_json))
        return lambda: hf.encode(text, add_special_tokens=False)

    def oracle_runner(tok: Tokenizer) -> Callable[[], Callable[[], object]]:
        def prepare() -> Callable[[], object]:
            tok.cache.clear()
            return lambda: tok.encode(text, parse_special=False)

        return prepare

    runners = {
        "oracle (qwen3)": oracle_runner(oracle3),
        "hf tokenizers (qwen3)": hf_runner,
        "llama.cpp (qwen3)": lambda: lambda: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False),
        "oracle (qwen3.6)": oracle_runner(oracle36),
        "tiktoken (qwen3.6)": lambda: (
            lambda: tiktoken.encode(text, allowed_special=set(), disallowed_special=())
        ),
    }
    times = {name: float("inf") for name in runners}
    for _ in range(args.reps):  # interleaved rounds, each engine cold every time
        for name, prepare in runners.items():
            times[name] = min(times[name], best_of(1, prepare))

    print(
        f"text: {len(text)} characters, {mb * 1e3:.0f} KB UTF-8; best of {args.reps} cold runs each, CPU time"
    )
    print(f"{'engine':<24}{'seconds':>9}{'MB/s':>8}")
    for name, t in times.items():
        print(f"{name:<24}{t:>9.3f}{mb / t:>8.2f}")
    print()
    for other, base in (
        ("hf tokenizers (qwen3)", "oracle (qwen3)"),
        ("llama.cpp (qwen3)", "oracle (qwen3)"),
        ("tiktoken (qwen3.6)", "oracle (qwen3.6)"),
    ):
        print(f"{base} / {other}: {times[other] / times[base]:.2f}x speed")


if __name__ == "__main__":
    main()

"""Greedy generations with stop strings for the generate stage.

A generate input is ``{"prompt": ids, "params": {temperature 0, repeat_penalty 1,
max_tokens ≤ 16, stop: [...]}}``. The prompts are the generate corpus's
(``corpus/stops/generate.toml``: code, prose, ChatML conversations, rare
characters), tokenized by the oracle with special-token parsing.

Stop strings are drawn where stop logic breaks: for each prompt the oracle's own
greedy continuation is computed once (and cached for the process), and stop
strings are cut out of its text across token boundaries (1-3 bytes each side of
a boundary, kept when valid UTF-8) — a stop string that straddles two tokens is
what a per-token matcher misses — or inside one token's piece; plus short random
strings over the continuation's characters and the special-token texts
(``<|im_end|>`` is a stop *token*, never text, in the stream).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from impl.datafiles import DATA_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

MAX_TOKENS = 16
GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0}
SPECIAL_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
CORPUS = DATA_ROOT / "corpus" / "stops" / "generate.toml"


def prompt_texts(model_id: str) -> list[str]:
    """The generate corpus's prompt texts that apply to ``model_id``."""
    corpus = tomllib.loads(CORPUS.read_text(encoding="utf-8"))
    return [
        p["text"]
        for p in corpus["prompts"].values()
        if any(model_id.startswith(prefix) for prefix in p.get("models", [""]))
    ]


def continuation(model: Any, oracle: Any, prompt: list[int]) -> list[bytes]:
    """The pieces of the oracle's greedy continuation of ``prompt`` (computed once per
    prompt when a stage's strategy is built: a few tokens of a tiny model)."""
    result = oracle.generate(model, prompt, {**GREEDY, "max_tokens": MAX_TOKENS})
    return [oracle.decode(model, [t]) for t in result["ids"]]


def straddling_stops(pieces: list[bytes]) -> list[str]:
    """Substrings of the continuation that cross a token boundary (1-3 bytes each side), valid UTF-8."""
    data, found, end = b"".join(pieces), [], 0
    for piece in pieces[:-1]:
        end += len(piece)
        for left in (1, 2, 3):
            for right in (1, 2, 3):
                if end - left < 0 or end + right > len(data):
                    continue
                text = _text(data[end - left : end + right])
                if text and text not in found:
                    found.append(text)
    return found


def inner_stops(pieces: list[bytes]) -> list[str]:
    """Whole pieces and their first characters: stop strings inside one token."""
    found: list[str] = []
    for piece in pieces:
        for text in (_text(piece), (_text(piece) or "")[:1]):
            if text and text not in found:
                found.append(text)
    return found


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def generate_inputs(model: Any, oracle: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Prompts × greedy parameters × stop strings drawn from each prompt's continuation."""
    prompts = [oracle.encode(model, text, True) for text in prompt_texts(model.id)]
    prompts = [p for p in prompts if p]
    if not prompts:
        raise ValueError(f"no generate corpus prompt applies to {model.id}")
    per_prompt = []
    for prompt in prompts:
        pieces = continuation(model, oracle, prompt)
        straddle, inner = straddling_stops(pieces), inner_stops(pieces)
        alphabet = sorted(set(b"".join(pieces).decode("utf-8", "replace")) | {" ", "\n", "a"})
        stop = st.text(st.sampled_from(alphabet), min_size=1, max_size=3) | st.sampled_from(SPECIAL_TEXTS)
        if inner:
            stop = st.sampled_from(inner) | stop
        if straddle:
            stop = st.sampled_from(straddle) | st.sampled_from(straddle) | stop  # weighted toward straddles
        per_prompt.append(
            st.fixed_dictionaries(
                {
                    "prompt": st.just(list(prompt)),
                    "params": st.fixed_dictionaries(
                        {
                            **{k: st.just(v) for k, v in GREEDY.items()},
                            "max_tokens": st.integers(1, MAX_TOKENS),
                            "stop": st.lists(stop, min_size=0, max_size=3),
                        }
                    ),
                }
            )
        )
    return st.one_of(per_prompt)


def size(inp: dict[str, Any]) -> int:
    """A generate input's size: the characters of its stop strings (what minimizing removes)."""
    return sum(len(s) for s in inp["params"].get("stop", []))


def shape(inp: dict[str, Any]) -> str:
    """A generate input's shape: one for all (the search keeps no variants of a generate
    signature: the prompts are the corpus's, the stop strings minimized to a few characters)."""
    return "greedy with stop strings"

"""The oracle decode loop on scripted logits: the known-answer stop cases of
corpus/stops/cases.toml, the penalty window, and streaming properties."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle import decode_loop
from oracle.sampler import SamplerError
from oracle.utf8 import complete_utf8_prefix_len
from tests.hypothesis_budget import examples

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CASES = tomllib.loads(
    (Path(__file__).resolve().parents[2] / "corpus" / "stops" / "cases.toml").read_text("utf-8")
)
GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0}


def piece_bytes(token: Any) -> bytes:
    return bytes.fromhex(token["hex"]) if isinstance(token, dict) else token.encode("utf-8")


class Scripted:
    """A logits source that makes the greedy choice at step n be ``script[n]``."""

    def __init__(self, vocab: list[bytes], script: list[int]) -> None:
        self.vocab, self.script, self.n = vocab, script, 0

    def logits(self) -> np.ndarray:
        x = np.full(len(self.vocab), -10.0, dtype=np.float32)
        x[self.script[min(self.n, len(self.script) - 1)]] = 10.0
        return x

    def prefill(self, ids: list[int]) -> np.ndarray:
        self.n = 0
        return np.stack([self.logits()] * len(ids))

    def step(self, token: int) -> np.ndarray:
        self.n += 1
        return self.logits()


def run_script(tokens: list[Any], params: dict[str, Any]) -> dict[str, Any]:
    vocab = [b"<eos>", b"<|im_end|>"]
    script = []
    for token in tokens:
        data = piece_bytes(token)
        if data not in vocab:
            vocab.append(data)
        script.append(vocab.index(data))
    return decode_loop.generate(Scripted(vocab, script), vocab.__getitem__, [2], params, stop_tokens=[0, 1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_stop_cases(name):
    case = CASES[name]
    params = {**GREEDY, "stop": case.get("stop", []), "max_tokens": case.get("max_tokens", 16)}
    got = run_script(case["tokens"], params)
    want_bytes = case["bytes"] if "bytes" in case else case["text"].encode("utf-8").hex()
    assert (got["bytes"], got["finish_reason"], len(got["ids"])) == (
        want_bytes,
        case["finish_reason"],
        case["n_ids"],
    ), (
        f"[decode loop] case {name}: got {bytes.fromhex(got['bytes'])!r} ({got['finish_reason']}, "
        f"{len(got['ids'])} ids), expected {bytes.fromhex(want_bytes)!r} ({case['finish_reason']}, {case['n_ids']} ids)"
    )
    if "chunks" in case:
        assert got["chunks"] == case["chunks"], f"[decode loop] case {name}: streamed chunks {got['chunks']}"


def test_penalty_window_is_seeded_from_the_prompt_tail():
    class Fixed:
        def prefill(self, ids):
            return np.array([[5.0, 4.9, 0.0]] * len(ids), dtype=np.float32)

        def step(self, token):
            return np.array([5.0, 4.9, 0.0], dtype=np.float32)

    pieces = [b"a", b"b", b"c"]
    prompt = [0] + [2] * 63  # token 0 is the 64th most recent prompt token
    got = decode_loop.generate(Fixed(), pieces.__getitem__, prompt, {"temperature": 0.0, "max_tokens": 2}, [])
    assert got["ids"] == [1, 0]  # 5/1.1 < 4.9, then 0 has left the window, 1 has entered it
    unpenalized = decode_loop.generate(
        Fixed(), pieces.__getitem__, [0] + [2] * 64, {"temperature": 0.0, "max_tokens": 1}, []
    )
    assert unpenalized["ids"] == [0]


def test_steps_record_the_top_raw_candidates():
    got = run_script(["x", "y"], {**GREEDY, "max_tokens": 2})
    assert [s["token"] for s in got["steps"]] == got["ids"]
    assert got["steps"][0]["top"][0] == [got["ids"][0], 10.0]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": -1}, "max_tokens"),
        ({"stops": ["x"]}, "stops"),
        ({"top_k": -2}, "top_k"),
        ({"stop": "x"}, "stop="),
    ],
)
def test_bad_generation_parameters_are_named(params, message):
    with pytest.raises(SamplerError, match=message):
        run_script(["a"], params)


# ---------------------------------------------------------------------------
# properties


class RandomLogits:
    """Deterministic pseudo-random logits, a function of the context so far."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab, self.ctx = n_vocab, []

    def logits(self) -> np.ndarray:
        seed = hash(tuple(self.ctx)) & 0xFFFFFFFF
        return np.random.default_rng(seed).normal(0, 2, self.n_vocab).astype(np.float32)

    def prefill(self, ids):
        self.ctx = list(ids)
        return np.stack([self.logits()] * len(ids))

    def step(self, token):
        self.ctx.append(token)
        return self.logits()


# 100, not 1000: randomness outside the seeded generator shows on the first example (12 draws
# per run); no planted defect or recorded bug needs more.
@examples(ci=100)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 49), min_size=1, max_size=5))
def test_same_seed_same_stream(seed, prompt):
    pieces = [bytes([65 + i % 26]) for i in range(50)]
    params = {"seed": seed, "max_tokens": 12, "temperature": 1.0}
    runs = [decode_loop.generate(RandomLogits(50), pieces.__getitem__, prompt, params, []) for _ in range(2)]
    assert runs[0] == runs[1]


text_pieces = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12
).flatmap(
    lambda s: st.lists(st.integers(1, 4), min_size=1, max_size=len(s.encode())).map(
        lambda cuts: (s.encode(), sorted({min(c * k, len(s.encode())) for k, c in enumerate(cuts, 1)}))
    )
)


# 200, not 1000: it finds the planted defect it targets (a split UTF-8 character emitted,
# tests/oracle/test_sampler_mutations.py) at example 7 of CI's derandomized run; 200 keeps a
# 25x margin. (A stop string searched per token it does not find in 1000: the stop-case known
# answers and the generate gate do.)
@examples(ci=200)
@given(
    st.lists(text_pieces, min_size=1, max_size=6),
    st.lists(st.sampled_from(["ab", "中", "é!", "x"]), max_size=2),
)
def test_holdback_chunks_are_whole_characters_and_concatenate_to_the_stream(texts, stops):
    tokens = []
    for data, cuts in texts:
        bounds = [0, *[c for c in cuts if 0 < c < len(data)], len(data)]
        tokens += [{"hex": data[a:b].hex()} for a, b in itertools.pairwise(bounds)]
    got = run_script(tokens, {**GREEDY, "stop": stops, "max_tokens": len(tokens)})
    stream = bytes.fromhex(got["bytes"])
    chunks = [bytes.fromhex(c) for c in got["chunks"]]
    assert b"".join(chunks) == stream
    for chunk in chunks:
        chunk.decode("utf-8")  # whole characters only: the source texts are valid UTF-8
    assert complete_utf8_prefix_len(stream) == len(stream)


@pytest.mark.parametrize(
    ("data", "prefix"),
    [
        (b"", 0),
        (b"abc", 3),
        (b"a\xe4\xb8", 1),
        (b"\xe4\xb8\xad", 3),
        (b"\xf0\x9f\x98", 0),
        (b"\xf0\x9f\x98\x80", 4),
        (b"\xc3", 0),
        (b"\xc3\xa9", 2),
        (b"\x80a", 2),
        (b"a\xff", 2),
    ],
)
def test_complete_utf8_prefix_len(data, prefix):
    assert complete_utf8_prefix_len(data) == prefix

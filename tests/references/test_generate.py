"""Record the generate reference: greedy streams of llama.cpp and transformers on the
prompts of corpus/stops/generate.toml, with each step's top-2 margin, plus stop-string
cases whose known answers follow from the agreed stream and the documented rules."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from specgate.checks import generate as generate_checks
from specgate.run.gate import first_difference, first_divergence
from specgate.run.selection import has_weights
from specgate.supply.models import is_known_id, load_manifest
from specgate.upkeep import snapshots
from tests.memory_profile import release_forward_weights

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.live

CORPUS = tomllib.loads(
    (Path(__file__).resolve().parents[2] / "corpus" / "stops" / "generate.toml").read_text("utf-8")
)
GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0, "max_tokens": CORPUS["max_tokens"]}


def applies(prompt: dict[str, Any], model_id: str) -> bool:
    return any(model_id.startswith(prefix) for prefix in prompt.get("models", [""]))


def reference_stream(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "ids": result["ids"],
        "finish_reason": result["finish_reason"],
        "margins": generate_checks.margins(result["steps"]),
    }


def agreed_prefix(streams: dict[str, dict[str, Any]], tolerance: float) -> tuple[list[int], str | None]:
    """The ids all references agree on, and why they part (None when identical)."""
    (a_name, a), *others = streams.items()
    ids = list(a["ids"])
    reason = None
    for b_name, b in others:
        n = first_difference(ids, b["ids"])
        n = len(ids) if n is None else n
        if n < len(ids) or n < len(b["ids"]) or a["finish_reason"] != b["finish_reason"]:
            margin = min(
                a["margins"][n] if n < len(a["margins"]) else float("inf"),
                b["margins"][n] if n < len(b["margins"]) else float("inf"),
            )
            if margin > tolerance:
                reason = (
                    f"{a_name} and {b_name} greedy streams part at step {n} with top-2 margin {margin:.4f} "
                    f"> tie tolerance {tolerance}:\n"
                    + first_divergence(generate_checks.stream(a), generate_checks.stream(b))
                )
        ids = ids[:n]
    return ids, reason


def straddle_stop(pieces: list[bytes]) -> bytes | None:
    """4 ASCII bytes around the first token boundary with 2 ASCII bytes each side."""
    for left, right in itertools.pairwise(pieces):
        around = left[-2:] + right[:2]
        if len(left) >= 2 and len(right) >= 2 and all(0x20 <= b < 0x7F for b in around):
            return around
    return None


def stop_after_split_character(pieces: list[bytes]) -> bytes | None:
    """A stop string after a valid character whose bytes span two tokens: the first
    whole character after it that does not occur earlier in the stream and does not
    start with the same byte (a stop-string prefix would be held back anyway and
    hide a holdback that splits the character)."""
    data, offset = b"".join(pieces), 0
    for piece in pieces[:-1]:
        offset += len(piece)
        if offset >= len(data) or data[offset] & 0xC0 != 0x80:  # the next token starts a new character
            continue
        lead = offset - 1
        while lead > 0 and data[lead] & 0xC0 == 0x80:
            lead -= 1
        end = next((lead + n for n in (2, 3, 4) if lead + n > offset and _whole(data[lead : lead + n])), None)
        if end is None:
            continue
        start = end
        while start < len(data):  # a valid character whose bytes straddle this token boundary was found
            char = next(
                (data[start : start + n] for n in (1, 2, 3, 4) if _whole(data[start : start + n])), None
            )
            if char is None:
                start += 1
                continue
            if char[0] != data[lead] and data.find(char) == start:
                return char
            start += len(char)
        return None
    return None


def _whole(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def stop_case(
    prompt_ids: list[int], pieces: list[bytes], stop: bytes, margins: list[float]
) -> dict[str, Any]:
    """Known answer: the stream cut where the stop string first starts; the ids up to
    the token that completes it."""
    data = b"".join(pieces)
    cut = data.find(stop)
    n_ids, total = 0, 0
    while total < cut + len(stop):
        total += len(pieces[n_ids])
        n_ids += 1
    return {
        "prompt": prompt_ids,
        "params": {**GREEDY, "max_tokens": n_ids, "stop": [stop.decode("utf-8")]},
        "expected": {"bytes": data[:cut].hex(), "finish_reason": "stop_string", "n_ids": n_ids},
        "reference": {"ids": None, "margins": margins[:n_ids]},
    }


def recorded_here(model_id: str, model_of) -> bool:
    """This stage's recorded models, and a user's own GGUF, when they have weights."""
    listed = model_id in CORPUS["models"] or not is_known_id(model_id)
    return listed and has_weights(model_id, load_manifest(), model_of)


@pytest.mark.applies_to.with_args(recorded_here, models=True)
def test_record_generate(request, reference, model_id, model):
    llama, hf = reference("llamacpp"), reference("hf")
    vocab = llama.llama(model, vocab_only=True)
    tolerance = generate_checks.tie_tolerance(model.id, "llamacpp")
    prompts = {
        name: vocab.tokenize(prompt["text"].encode("utf-8"), add_bos=False, special=True)
        for name, prompt in CORPUS["prompts"].items()
        if applies(prompt, model.id)
    }
    # One reference's weights at a time (llama.cpp's context, then transformers' float32
    # model): for the 0.5B the two together raised the live tier's peak by 2 GB.
    by_reference: dict[str, dict[str, Any]] = {}
    for name, engine in (("llamacpp", llama), ("transformers", hf)):
        by_reference[name] = {
            p: reference_stream(engine.generate(model, ids, GREEDY)) for p, ids in prompts.items()
        }
        release_forward_weights(engine, model)
    cases: dict[str, Any] = {}
    for name, ids in prompts.items():
        streams = {reference_name: streams[name] for reference_name, streams in by_reference.items()}
        agreed, reason = agreed_prefix(streams, tolerance)
        case: dict[str, Any] = {"prompt": ids, "params": GREEDY, "references": streams}
        if reason:
            case["disagreement"] = reason
        cases[f"greedy/{name}"] = case

        pieces = [vocab.detokenize([t]) for t in agreed]
        margins = [min(s["margins"][k] for s in streams.values()) for k in range(len(agreed))]
        finders = {"straddle": straddle_stop, "after-split-character": stop_after_split_character}
        for kind in CORPUS["stops"]["kinds"]:
            stop = finders[kind](pieces)
            if stop is not None:
                stop_ = stop_case(ids, pieces, stop, margins)
                stop_["reference"]["ids"] = agreed[: stop_["expected"]["n_ids"]]
                cases[f"stop-{kind}/{name}"] = stop_
    snapshots.record(
        request,
        llama,
        model,
        "generate",
        cases,
        references={
            "llamacpp": "greedy argmax of llama.cpp logits, llama_vocab_is_eog stops",
            "transformers": "generate(do_sample=False) on the GGUF dequantized to f32",
        },
        packages=("llama-cpp-python", "transformers", "torch"),
        drift=generate_checks.generate_drift(model.id),
    )

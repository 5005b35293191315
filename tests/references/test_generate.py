"""Record the generate reference: greedy streams of llama.cpp and transformers on the
prompts of corpus/stops/generate.toml, with each step's top-2 margin, plus stop-string
cases whose known answers follow from the agreed stream and the documented rules
(built by ``specgate.stages.generate_cases``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specgate.checks import generate as generate_checks
from specgate.run.selection import has_weights
from specgate.stages import STAGES
from specgate.stages.generate_cases import reference_stream
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
    cases = STAGES["generate"].build(
        prompts, by_reference, vocab.detokenize, GREEDY, tolerance, CORPUS["stops"]["kinds"]
    )
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

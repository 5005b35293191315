"""The stages the search explores: for each, its input strategy, the models it runs
on by default, the gate stage its divergences are judged and replayed as
(``specgate.run.triage.recheck``), and the references that confirm them.

A stage's inputs are the very inputs ``specgate repro`` replays, so every
reproducer the search writes is a regular triage reproducer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from specgate import stages as gate_stages
from specgate.search import conversations, generation, templates, texts
from specgate.search import sampler_inputs as sampler


@dataclass(frozen=True)
class SearchStage:
    name: str  # the search's name (``--stages``)
    gate_stage: str  # the gate stage's row divergences are judged and replayed as (``specgate.stages``)
    default_models: tuple[str, ...]
    judges: tuple[
        str, ...
    ]  # the references that confirm a divergence (``specgate.search.reference_confirm``)
    inputs: Callable[[Any, Any], st.SearchStrategy[dict[str, Any]]]  # (model, oracle) -> strategy

    @property
    def capability(self) -> str:
        """What the engine must offer: the gate stage's protocol operation."""
        return gate_stages.stage_of(self.gate_stage).capability


def _decode_inputs(model: Any, oracle: Any) -> st.SearchStrategy[dict[str, Any]]:
    meta = oracle.metadata(model)
    special = [v for k, v in meta["special"].items() if isinstance(v, int) and not isinstance(v, bool)]
    return texts.decode_inputs(int(meta["tokenizer"]["n_tokens"]), special)


def _logits_inputs(model: Any, oracle: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Short prompts (the forward pass is the costly call): any ids, special ids among them."""
    meta = oracle.metadata(model)
    special = sorted({v for v in meta["special"].values() if isinstance(v, int) and not isinstance(v, bool)})
    ids = st.integers(0, int(meta["tokenizer"]["n_tokens"]) - 1) | st.sampled_from(special)
    return st.fixed_dictionaries({"ids": st.lists(ids, min_size=1, max_size=6)})


TOKENIZER_MODELS = ("qwen3-vocab",)
#: The forward stage runs on a tiny model (float32 weights): the 0.5B numpy forward is too slow to explore.
FORWARD_MODELS = ("tiny-qwen2-f32",)
SEARCHABLE: dict[str, SearchStage] = {
    s.name: s
    for s in (
        SearchStage("split", "split", TOKENIZER_MODELS, ("regex",), lambda m, o: texts.split_inputs()),
        SearchStage(
            "encode",
            "encode",
            TOKENIZER_MODELS,
            ("llamacpp", "hf"),
            lambda m, o: texts.encode_inputs(),
        ),
        # decode: llama.cpp's bytes only, as the decode snapshots — HF decodes to str, so it cannot
        # judge partial UTF-8 (its U+FFFD is not the bytes).
        SearchStage("decode", "decode", TOKENIZER_MODELS, ("llamacpp",), _decode_inputs),
        SearchStage(
            "render",
            "render",
            ("qwen3-vocab",),
            ("hf",),
            lambda m, o: conversations.render_inputs(),
        ),
        SearchStage(
            "template",
            "render",
            ("constructs",),
            ("hf",),
            lambda m, o: templates.construct_inputs(),
        ),
        SearchStage("sample", "sample", ("sampler",), ("llamacpp",), lambda m, o: sampler.sample_inputs()),
        # logits: the engine's conformance class decides which (``session.plan``): exact is held to
        # transformers' f32 forward, quantized to llama.cpp, as in the logits gate.
        SearchStage("logits", "logits/exact", FORWARD_MODELS, ("hf",), _logits_inputs),
        # generate: greedy streams with stop strings on a tiny model, judged per class as logits is;
        # the references generate without stop strings, the documented stop rule is applied to
        # their streams (``confirm.StopRuleReference``).
        SearchStage("generate", "generate/exact", FORWARD_MODELS, ("hf",), generation.generate_inputs),
    )
}
QUANTIZED_LOGITS = SearchStage("logits", "logits/quantized", FORWARD_MODELS, ("llamacpp",), _logits_inputs)
QUANTIZED_GENERATE = SearchStage(
    "generate", "generate/quantized", FORWARD_MODELS, ("llamacpp",), generation.generate_inputs
)
#: ``--stages`` default: all but logits and generate (forward passes per example: asked for by name).
DEFAULT_SEARCHABLE = tuple(name for name in SEARCHABLE if name not in ("logits", "generate"))


def size(inp: dict[str, Any]) -> int:
    """How big an input is, in the units it is shrunk by (what a reproducer's size means)."""
    if "logits" in inp:
        return len(inp["logits"]["ids"]) + len(inp["params"].get("window", []))
    if "prompt" in inp:
        return generation.size(inp)
    from specgate.run.triage import size as triage_size

    return triage_size(inp)

"""The stages the search explores: for each, its input strategy, the models it runs
on by default, the gate stage its divergences are judged and replayed as
(``specgate.triage.recheck``), and the references that confirm them.

A stage's inputs are the very inputs ``specgate repro`` replays, so every
reproducer the search writes is a regular triage reproducer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from specgate.search import conversations, sampler, templates, texts


@dataclass(frozen=True)
class Stage:
    name: str  # the search's name (``--stages``)
    gate_stage: str  # the triage / gate stage divergences are judged as
    capability: str  # what the engine must offer
    default_models: tuple[str, ...]
    judges: tuple[str, ...]  # the references that confirm a divergence (``specgate.search.confirm``)
    inputs: Callable[[Any, Any], st.SearchStrategy[dict[str, Any]]]  # (model, oracle) -> strategy


def _decode_inputs(model: Any, oracle: Any) -> st.SearchStrategy[dict[str, Any]]:
    meta = oracle.metadata(model)
    special = [v for k, v in meta["special"].items() if isinstance(v, int) and not isinstance(v, bool)]
    return texts.decode_inputs(int(meta["tokenizer"]["n_tokens"]), special)


TOKENIZER_MODELS = ("qwen3-vocab",)
STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("split", "split", "split", TOKENIZER_MODELS, ("regex",), lambda m, o: texts.split_inputs()),
        Stage(
            "encode",
            "encode",
            "encode",
            TOKENIZER_MODELS,
            ("llamacpp", "hf"),
            lambda m, o: texts.encode_inputs(),
        ),
        Stage("decode", "decode", "decode", TOKENIZER_MODELS, ("llamacpp", "hf"), _decode_inputs),
        Stage(
            "render",
            "render",
            "render",
            ("qwen3-vocab",),
            ("hf",),
            lambda m, o: conversations.render_inputs(),
        ),
        Stage(
            "template",
            "render",
            "render",
            ("constructs",),
            ("hf",),
            lambda m, o: templates.construct_inputs(),
        ),
        Stage(
            "sample", "sample", "sample", ("sampler",), ("llamacpp",), lambda m, o: sampler.sample_inputs()
        ),
    )
}
#: ``--stages`` default: every stage above (logits and generate are not searched: see README).
DEFAULT_STAGES = tuple(STAGES)


def size(inp: dict[str, Any]) -> int:
    """How big an input is, in the units it is shrunk by (what a reproducer's size means)."""
    if "logits" in inp:
        return len(inp["logits"]["ids"]) + len(inp["params"].get("window", []))
    from specgate.triage import size as triage_size

    return triage_size(inp)

"""Record the trace references: per model and trace prompt, every point of the forward
pass (``oracle.trace``) at every position of the prompt's first few tokens, from
transformers (float32 on the GGUF's dequantized weights, hooked: the exact class) and
from llama.cpp (its graph evaluation callback: the quantized class). ``result_output``
is kept at the union of both references' top columns only. Without
``--record-references`` the live references are held to the stored ones by the trace
tolerances: transformers by the exact class's, llama.cpp by the quantized class's. Each
prompt's case is built by ``specgate.stages.forward_cases.trace_case``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from oracle.dispatch import dispatch
from oracle.gguf import open_gguf
from oracle.trace import all_points
from specgate.checks import trace as checks
from specgate.stages import STAGES
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import TRACE_TOKENS, is_tiny, trace_prompts
from tests.memory_profile import release_forward_weights

pytestmark = pytest.mark.live


def test_record_trace(request, specgate, reference, forward_model_id):
    model = specgate.model(forward_model_id)
    hf, llama = reference("hf"), reference("llamacpp")
    vocab = llama.llama(model, vocab_only=True)
    n_tokens = TRACE_TOKENS["tiny" if is_tiny(model.id) else "real"]
    hparams = dispatch(open_gguf(model.gguf)).hparams  # the prompt's shape, not a reference output
    meta = {"n_layer": hparams.n_layer, "head_dim": hparams.head_dim}
    points = all_points(meta["n_layer"])
    prompts = {
        prompt_id: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)[:n_tokens]
        for prompt_id, text in trace_prompts().items()
    }
    # One reference's weights at a time: transformers' first, then llama.cpp's tracing context.
    from_hf = {prompt_id: hf.trace(model, ids, points) for prompt_id, ids in prompts.items()}
    release_forward_weights(hf, model)
    # a re-check reads the live references at the recorded columns (``trace_case``)
    stored = (
        {}
        if snapshots.recording(request)
        else snapshots.load(model, "trace", snapshots.root_of(request.config))
    )
    cases: dict[str, Any] = {}
    for prompt_id, ids in prompts.items():
        columns = stored[prompt_id]["output_columns"] if prompt_id in stored else None
        cases[prompt_id] = STAGES["trace"].build(
            ids, meta, points, from_hf[prompt_id], llama.trace(model, ids, points), columns=columns
        )
    llama.release_forward(model)
    snapshots.record(
        request, hf, model, "trace", cases,
        references={
            "hf": "transformers float32 forward on the GGUF's weights dequantized by gguf-py (eager attention), "
                  "its intermediates through module hooks and a registered attention function",
            "llamacpp": "llama.cpp's intermediates on the same GGUF through its graph evaluation callback (cb_eval)",
        },
        packages=("transformers", "torch", "gguf", "llama-cpp-python"),
        drift=lambda case_id, stored, live: checks.trace_drift(stored, live),
    )  # fmt: skip


def test_traced_references_compute_what_they_compute_untraced(specgate, reference):
    """Observing changes nothing: transformers' traced logits are its logits, bit for bit
    (the registered attention function is eager attention with eager's mask); llama.cpp's
    ``result_output`` through ``cb_eval`` is its logits (another context: within rounding)."""
    from specgate.supply import models

    hf, llama = reference("hf"), reference("llamacpp")
    ids = [151644, 872, 198, 10234, 374, 279, 12884, 6303]
    for model_id in ("tiny-qwen2-q8_0", "tiny-qwen3-q4_k"):
        if model_id not in models.cached_tiny_models():
            from specgate.plugin import model_missing

            model_missing(f"{model_id} (run: specgate models tiny)")
        model = specgate.model(model_id)
        traced = hf.trace(model, ids, ["result_output", "l_out-1"])
        assert np.array_equal(traced["result_output"], hf.logits(model, ids))
        from_cb = llama.trace(model, ids, ["result_output", "inp_embd"], positions=[0, 7])
        logits = llama.logits(model, ids)
        assert from_cb["result_output"].shape == (2, logits.shape[1])
        assert np.abs(from_cb["result_output"] - logits[[0, 7]]).max() < 1e-3
        release_forward_weights(hf, model)
        llama.release_forward(model)

"""Record the trace references: per model and trace prompt, every point of the forward
pass (``oracle.trace``) at every position of the prompt's first few tokens, from
transformers (float32 on the GGUF's dequantized weights, hooked: the exact class) and
from llama.cpp (its graph evaluation callback: the quantized class). ``result_output``
is kept at the union of both references' top columns only. Without
``--record-references`` the live references are held to the stored ones by the trace
tolerances: transformers by the exact class's, llama.cpp by the quantized class's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from impl.process import wire
from oracle.dispatch import dispatch
from oracle.gguf import open_gguf
from oracle.trace import all_points
from specgate.checks import trace as checks
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import TRACE_TOKENS, TRACE_TOP_COLUMNS, is_tiny, trace_prompts
from tests.memory_profile import release_forward_weights

pytestmark = pytest.mark.live


def record_form(values: dict[str, np.ndarray], columns: list[int], dtype: str) -> dict[str, Any]:
    out = {}
    for point, value in values.items():
        value = value[:, columns] if point == "result_output" else value
        out[point] = wire.encode_value(np.ascontiguousarray(value, dtype=dtype))
    return out


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
    cases: dict[str, Any] = {}
    for prompt_id, ids in prompts.items():
        ref_hf, ref_llama = from_hf[prompt_id], llama.trace(model, ids, points)
        top = np.argsort(-ref_hf["result_output"], axis=-1)[:, :TRACE_TOP_COLUMNS]
        top_llama = np.argsort(-ref_llama["result_output"], axis=-1)[:, :TRACE_TOP_COLUMNS]
        columns = sorted({int(c) for c in np.concatenate([top, top_llama]).ravel()})
        between = {
            p: checks.compare(p, ref_hf[p].astype(np.float64), ref_llama[p], np.inf, 0).rel for p in points
        }
        cases[prompt_id] = {
            "ids": ids,
            "n_layer": meta["n_layer"],
            "head_dim": meta["head_dim"],
            "output_positions": list(range(len(ids))),
            "output_columns": columns,
            "hf": record_form(ref_hf, columns, "float32"),
            # llama.cpp's own rounding is far above float16's (2^-11 relative; the quantized
            # tolerances are ≥ 1e-2): half the bytes, nothing the gate can see.
            "llamacpp": record_form(ref_llama, columns, "float16"),
            "llamacpp_vs_hf": {p: float(f"{v:.3g}") for p, v in between.items()},
        }
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

"""Record the logits references: per model and prompt, the prompt ids (llama.cpp's
tokenization of the model's own vocabulary) and, at the recorded positions, the top-k
tokens, log-probabilities and log-sum-exp of transformers (float32 on the GGUF's
dequantized weights — the tight reference) and of llama.cpp (the loose one). Each
prompt's case is built by ``specgate.stages.forward_cases.logits_case``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specgate.checks import logit_metrics
from specgate.checks.logits import logits_drift
from specgate.plugin import model_missing
from specgate.stages import STAGES
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import POSITIONS, is_tiny, prompts_for
from tests.live_logits import forget_logits, reference_logits
from tests.memory_profile import release_forward_weights

pytestmark = pytest.mark.live


def test_record_logits(request, specgate, reference, forward_model_id):
    model = specgate.model(forward_model_id)
    hf, llama = reference("hf"), reference("llamacpp")
    vocab = llama.llama(model, vocab_only=True)
    limit = POSITIONS["tiny" if is_tiny(model.id) else "real"]
    stored = (
        None
        if snapshots.recording(request)
        else snapshots.load(model, "logits", snapshots.root_of(request.config))
    )
    prompts = {
        prompt_id: (prompt, vocab.tokenize(str(prompt["text"]).encode("utf-8"), add_bos=False, special=True))
        for prompt_id, prompt in prompts_for(model.id).items()
    }
    # One reference's weights at a time: transformers' float32 model first, its logits
    # kept on disk; then llama.cpp's context (for the 0.5B the two together were 5.5 GB).
    for _prompt, ids in prompts.values():
        reference_logits(hf, model, ids, keep=True)
    release_forward_weights(hf, model)
    cases: dict[str, Any] = {}
    drifts: dict[str, str | None] = {}
    for prompt_id, (prompt, ids) in prompts.items():
        positions = logit_metrics.record_positions(len(ids), limit)
        ref_hf, ref_llama = reference_logits(hf, model, ids), llama.logits(model, ids)
        cases[prompt_id] = STAGES["logits"].build(prompt, ids, positions, ref_hf, ref_llama)
        if stored and prompt_id in stored:  # the full logits are not kept: judge drift now
            drifts[prompt_id] = logits_drift(model.id, stored[prompt_id], ids, ref_hf, ref_llama)
    llama.release_forward(model)
    forget_logits(model)
    snapshots.record(
        request, hf, model, "logits", cases,
        references={
            "hf": "transformers float32 forward on the GGUF's weights dequantized by gguf-py (eager attention)",
            "llamacpp": "llama.cpp logits_all on the same GGUF (activations quantized for quantized matmuls)",
        },
        packages=("transformers", "torch", "gguf", "llama-cpp-python"),
        drift=lambda case_id, _stored, _live: drifts[case_id],
    )  # fmt: skip


@pytest.mark.slow
def test_dequantized_loader_matches_transformers_gguf(request, specgate, reference):
    """The tiny models' transformers reference is built by ``impl.hf.forward.load_dequantized``
    (fast); it must give the logits transformers' own GGUF loader gives on the same file.
    It runs when that file is among the run's models with weights: a recording of a user's
    own GGUF (``--model PATH``) or of another sample does not pay for it (~60 s: transformers'
    loader parses the file's 150k-entry vocabulary twice)."""
    from impl.hf import forward as hf_forward
    from specgate.run.selection import forward_models
    from specgate.supply import models

    reference("hf")  # skips unless --live-references
    model_id = "tiny-qwen3-q4_k"  # qwen3 with head_dim != n_embd / n_head, K-quants and fallbacks
    if model_id not in forward_models(request.config):
        pytest.skip(f"{model_id} is not among this run's models with weights (--model, --reference-models)")
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    path = specgate.model(model_id).gguf
    ids = list(range(9000, 9040))
    a = hf_forward.logits(hf_forward.load_dequantized(path), ids)
    b = hf_forward.logits(hf_forward.load_transformers_gguf(path), ids)
    assert np.array_equal(a, b), f"max |Δ| {np.abs(a - b).max()} between the two transformers loading paths"

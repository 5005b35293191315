"""The oracle's forward pass: properties that need no reference (KV cache splits,
causality, RoPE's relative-position property, the weight budget), clear errors on bad
input, the tiny models' tensor types, and the tight comparison with live transformers
(full vocabulary, every position)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import rope
from oracle.dispatch import UnsupportedModel
from oracle.forward import ContextOverflow, Model, silu
from oracle.gguf import open_gguf
from oracle.weights import UnsupportedTensorType
from specgate.checks import logit_metrics
from specgate.checks.logits import exact_tolerance
from specgate.plugin import model_missing
from specgate.supply import models, tiny
from specgate.supply.models import model_ref
from specgate.upkeep.corpus import prompts_for
from tests.live_logits import reference_logits
from tests.memory_profile import release_forward_weights

# A split of one sequence into prefill + steps multiplies the same numbers in
# differently shaped matmuls (BLAS blocks gemm and gemv differently): float32 rounding
# of the tiny models' logits (|logit| ≤ 17), measured ≤ 1e-5.
SPLIT_TOL = 1e-4


def tiny_model(model_id: str, **kwargs: int) -> Model:
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    return Model.from_gguf(model_ref(model_id).gguf, **kwargs)


@pytest.fixture(scope="module")
def qwen2() -> Model:
    return tiny_model("tiny-qwen2-q8_0")


@pytest.fixture(scope="module")
def qwen3() -> Model:
    return tiny_model("tiny-qwen3-q4_k")


IDS = [int(x) for x in np.random.default_rng(7).integers(0, 151_643, 48)]


# -- KV cache: any split of a sequence gives the logits of one prefill ------------------


@settings(max_examples=15, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("which", ["qwen2", "qwen3"])
def test_kv_cache_split_equals_one_prefill(which, data, request):
    model: Model = request.getfixturevalue(which)
    n = data.draw(st.integers(2, len(IDS)), label="n")
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=6), label="cuts"))
    model.reset()
    whole = model.prefill(IDS[:n])
    model.reset()
    parts, start = [], 0
    for end in [*cuts, n]:
        chunk = IDS[start:end]
        parts.append(model.step(chunk[0])[None] if len(chunk) == 1 else model.prefill(chunk))
        start = end
    assert model.n_past == n
    split = np.concatenate(parts)
    worst = np.abs(split - whole).max()
    assert worst <= SPLIT_TOL, f"{which}: prefill split at {cuts} of {n} differs by {worst:.3g} > {SPLIT_TOL}"


def test_step_by_step_equals_prefill(qwen3):
    qwen3.reset()
    whole = qwen3.prefill(IDS[:12])
    qwen3.reset()
    steps = np.stack([qwen3.step(t) for t in IDS[:12]])
    assert np.abs(steps - whole).max() <= SPLIT_TOL


def test_causality_prefix_logits_do_not_depend_on_later_tokens(qwen2):
    qwen2.reset()
    a = qwen2.prefill(IDS[:20])
    qwen2.reset()
    b = qwen2.prefill(IDS[:10] + IDS[30:40])
    assert np.abs(a[:10] - b[:10]).max() <= SPLIT_TOL
    assert np.abs(a[10:] - b[10:]).max() > 1e-2  # later positions do see their own tokens


def test_reset_forgets_the_past(qwen2):
    qwen2.reset()
    qwen2.prefill(IDS[:5])
    qwen2.reset()
    assert qwen2.n_past == 0
    again = qwen2.prefill(IDS[:5])
    qwen2.reset()
    assert np.array_equal(again, qwen2.prefill(IDS[:5]))


@given(p=st.integers(0, 10_000), s=st.integers(0, 10_000), shift=st.integers(0, 5_000))
@settings(max_examples=50, deadline=None)
def test_rope_scores_depend_only_on_distance(p, s, shift):
    """<rope(q, p), rope(k, s)> = <rope(q, p + c), rope(k, s + c)>: what makes RoPE relative."""
    rng = np.random.default_rng(p * 7 + s)
    q, k = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)

    def score(a: int, b: int) -> float:
        cq, sq = rope.rope_angles(np.array([a]), 64, 1e6)
        ck, sk = rope.rope_angles(np.array([b]), 64, 1e6)
        return float(rope.apply_rope(q[None], cq, sq)[0] @ rope.apply_rope(k[None], ck, sk)[0])

    assert abs(score(p, s) - score(p + shift, s + shift)) <= 1e-3 * (1 + abs(score(p, s)))


def test_silu_equals_its_definition_without_overflow_warnings():
    """x·sigmoid(x) to float32 rounding, with exp(-x) overflowing quietly to the right limit."""
    x = np.concatenate([np.float32([-1e4, -100.0, -88.8, -88.7, 0.0, 88.7, 1e4]),
                        np.random.default_rng(0).standard_normal(10_000, dtype=np.float32) * 8])  # fmt: skip
    x64 = x.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning from silu would raise here
        got = silu(x)
    want = x64 * np.exp(-np.logaddexp(0.0, -x64))  # x * sigmoid(x), stable in float64
    assert np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= 1e-6 * (1 + np.abs(want)).max()


def test_streaming_weights_equal_cached_weights():
    """A zero budget streams every matrix block by block: same logits as caching them."""
    cached = tiny_model("tiny-qwen2-tied-q4_k")
    streamed = tiny_model("tiny-qwen2-tied-q4_k", budget_bytes=0)
    a, b = cached.prefill(IDS[:16]), streamed.prefill(IDS[:16])
    assert streamed.weights.cached_bytes == 0
    assert np.abs(a - b).max() <= SPLIT_TOL


# -- bad input: clear errors ---------------------------------------------------------------


def test_context_overflow_is_a_clear_error():
    model = tiny_model("tiny-qwen2-f16", n_ctx=8)
    model.prefill(IDS[:6])
    model.step(IDS[6])
    model.step(IDS[7])
    with pytest.raises(ContextOverflow, match=r"8 cached \+ 1 new tokens .* n_ctx=8"):
        model.step(IDS[8])
    model.reset()
    with pytest.raises(ContextOverflow, match="n_ctx=8"):
        model.prefill(IDS[:9])


@pytest.mark.parametrize(("ids", "message"), [([], "at least one token"), ([5, 151_936], "151936 is outside"),
                                              ([-1], "-1 is outside")])  # fmt: skip
def test_bad_token_ids_are_clear_errors(qwen2, ids, message):
    qwen2.reset()
    with pytest.raises(ValueError, match=message):
        qwen2.prefill(ids)
    assert qwen2.n_past == 0


def test_vocab_only_gguf_is_refused():
    if "qwen3-vocab" not in models.cached_models():
        model_missing("qwen3-vocab (run: specgate models fetch)")
    with pytest.raises(UnsupportedModel, match="vocab-only"):
        Model.from_gguf(models.model_ref("qwen3-vocab").gguf)


def test_unsupported_tensor_type_is_refused_by_name(tmp_path):
    """A Q2_K tensor (llama.cpp quantizes the tiny model's ffn_down to it) is refused at load."""
    pytest.importorskip("llama_cpp")
    from specgate.supply import convert

    src = model_ref("tiny-qwen2-f32").gguf if "tiny-qwen2-f32" in models.cached_tiny_models() else None
    if src is None:
        model_missing("tiny-qwen2-f32 (run: specgate models tiny)")
    out = tmp_path / "q2_k.gguf"
    convert.QUANT_FTYPES["q2_k"] = "LLAMA_FTYPE_MOSTLY_Q2_K"
    try:
        convert.quantize(src, out, "q2_k")
    finally:
        del convert.QUANT_FTYPES["q2_k"]
    with pytest.raises(UnsupportedTensorType, match=r"blk\.0\.ffn_down\.weight \(Q2_K\).*supports .*Q4_K"):
        Model.from_gguf(out)


# -- the tiny models are what they claim ------------------------------------------------------

EXPECTED_TYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1",
                 "q5_0": "Q5_0", "q5_1": "Q5_1", "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K"}  # fmt: skip


@pytest.mark.parametrize("model_id", tiny.model_ids())
def test_tiny_model_holds_its_tensor_type(model_id):
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    family, kind = tiny.parse_id(model_id)
    spec = tiny.FAMILIES[family]
    g = open_gguf(model_ref(model_id).gguf, header_only=True)
    types = {name: info.type_name for name, info in g.tensors.items()}
    assert json.loads((tiny.gguf_path(model_id).parent / "tensor_types.json").read_text()) == types
    matrices = {n: t for n, t in types.items() if len(g.tensors[n].shape) == 2}
    want = EXPECTED_TYPE[kind]
    assert want in matrices.values(), f"{model_id}: no {want} tensor at all: {matrices}"
    # the FFN down projection (rows of n_ff = 256/512 values) can hold every type
    assert all(types[f"blk.{i}.ffn_down.weight"] == want for i in range(spec.n_layer)), matrices
    assert ("output.weight" not in types) == spec.tied
    arch = g.get("general.architecture")
    assert (arch, g.get(f"{arch}.attention.head_count_kv") < g.get(f"{arch}.attention.head_count")) == (
        spec.arch,
        True,
    )
    assert len(g.get("tokenizer.ggml.tokens")) == tiny.N_VOCAB


# -- tight, live: the full vocabulary at every position vs transformers --------------------

LIVE_MODELS = ["tiny-qwen2-f32", "tiny-qwen3-q4_k", "tiny-qwen2-tied-q6_k", "qwen2.5-coder-0.5b-instruct"]
LIVE_PROMPTS = ["single_token", "raw_zh", "chat_basic", "long_code_512"]


@pytest.mark.live
@pytest.mark.parametrize("model_id", LIVE_MODELS)
def test_oracle_matches_transformers_full_logits(model_id, reference, request):
    hf, llama = reference("hf"), reference("llamacpp")
    if model_id not in models.cached_models() + models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models fetch / tiny)")
    model = model_ref(model_id)
    from impl.oracle import OracleEngine

    vocab = llama.llama(model, vocab_only=True)
    tol = exact_tolerance(model_id)
    worst = {"max_abs_dlogit": 0.0, "kl_mean": 0.0, "top1_agree": 1.0}
    prompt_ids = {
        prompt_id: vocab.tokenize(
            str(prompts_for(model_id)[prompt_id]["text"]).encode(), add_bos=False, special=True
        )
        for prompt_id in LIVE_PROMPTS
    }
    # transformers' weights, then the oracle's, never both (with the 0.5B: 2 GB each)
    for ids in prompt_ids.values():
        reference_logits(hf, model, ids, keep=True)
    release_forward_weights(hf, model)
    for prompt_id, ids in prompt_ids.items():
        cmp = logit_metrics.compare_full(
            reference_logits(hf, model, ids), OracleEngine().logits(model, ids), tie_margin=2 * tol
        )
        worst = {"max_abs_dlogit": max(worst["max_abs_dlogit"], cmp.max_abs_dlogit),
                 "kl_mean": max(worst["kl_mean"], cmp.kl_mean), "top1_agree": min(worst["top1_agree"], cmp.top1_agree)}  # fmt: skip
        assert cmp.max_abs_dlogit <= tol, (
            f"{model_id}/{prompt_id}: max |Δlogit| {cmp.max_abs_dlogit:.3g} > {tol}"
        )
        assert cmp.kl_mean <= 0.5 * tol * tol, f"{model_id}/{prompt_id}: mean KL {cmp.kl_mean:.3g}"
        assert not cmp.disagreements, f"{model_id}/{prompt_id}: top-1 differs: {cmp.disagreements[:3]}"
    for name, value in worst.items():
        request.node.user_properties.append((f"metric:{name}", value))

"""The tiny models are a pure function of their spec: valid blocks of every type, within a
stated error of the float weights, written byte-identically by any process, anywhere,
without torch or llama.cpp — and those bytes are the ones the snapshots were recorded on."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.supply import tiny, tiny_quants
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import is_tiny

ROOT = Path(__file__).resolve().parents[2]
Q = tiny_quants.Q


def weights_with_edge_cases(cols: int, seed: int = 7) -> np.ndarray:
    """Gaussian rows like the tiny models', plus the rows that break naive quantizers:
    all zero, all positive, all negative, one outlier, values near float16's smallest."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((24, cols)) * 0.2).astype(np.float32)
    x[0] = 0
    x[1] = np.abs(x[1])
    x[2] = -np.abs(x[2])
    x[3, 5] = 40.0
    x[4] *= 1e-6
    x[5, : cols // 2] = 0  # a zero first half: whole zero sub-blocks next to live ones
    return x


def blocks_of(x: np.ndarray, qtype: Q) -> tuple[np.ndarray, np.ndarray]:
    """(values, their blocks) with one block a row, in the order gguf-py dequantizes."""
    size, type_size = GGML_QUANT_SIZES[qtype]
    packed = tiny_quants.quantize(x, qtype)
    return x.reshape(-1, size), packed.reshape(-1, type_size)


# -- the bound of each type, stated from its construction (see specgate/supply/tiny_quants.py) -----------
#
# R = a block's (or sub-block's) range as the type encodes it. A scale stored as f16 is off by at
# most 2^-11 relative + 2^-25 absolute when rounded to nearest (f16 keeps 11 significant bits; its
# subnormals are 2^-24 apart), 2^-10 relative + 2^-24 absolute when rounded up (ours).
#  * K quants (ours): the stored step of sub-block j is step_j < R_j/top + d + dmin/top, with the
#    6-bit (Q6_K: 8-bit) super scales d <= 1.001 R_max/(top*63) and dmin <= 1.001 R_max/63; every
#    value is rounded to its nearest level inside the covered range: |err| <= step_j / 2.
#    Q4_K/Q5_K: R_j = max_j - min(min_j, 0), top = 15/31; Q6_K: R_j = |x|max_j, top = 31, d <= R_max/(31*127).
#  * gguf-py's Q4_0/Q5_0 (d = -max/8, -max/16; levels -8..7, -16..15): a value of the sign opposite to
#    the largest one can be clipped a whole step: |err| <= |max|/8 (/16), + f16 rounding of d.
#  * gguf-py's Q4_1/Q5_1 (d = (max-min)/15 or 31, offset min): |err| <= d/2 + f16 rounding of d and min.
#  * Q8_0: d = amax/127, |err| <= d/2 + 127 * f16 rounding of d.
#  * BF16: round to nearest even with 8 significant bits: 2^-8 relative; F16: 2^-11 relative
#    (values below f16's normal range: 2^-25 absolute); F32: exact.


F16_UP, F16_NEAR = 2.0**-24, 2.0**-25  # absolute part of a scale's f16 rounding (up / nearest)


def k_bound(x: np.ndarray, qtype: Q) -> np.ndarray:
    """Per value of 256-value blocks ``x`` (one a row), the bound above for our K quants."""
    sub, top = (16, 31) if qtype == Q.Q6_K else (32, {Q.Q4_K: 15, Q.Q5_K: 31}[qtype])
    s = x.reshape(x.shape[0], -1, sub)
    if qtype == Q.Q6_K:
        r = np.abs(s).max(-1)
        step = r / 31 + 1.001 * r.max(-1, keepdims=True) / (31 * 127) + F16_UP
    else:
        r = s.max(-1) - np.minimum(s.min(-1), 0)
        rmax = r.max(-1, keepdims=True)
        step = r / top + 1.001 * rmax / (top * 63) + 1.001 * rmax / (63 * top) + F16_UP * (1 + 1 / top)
    return np.repeat(step / 2, sub, axis=1) * (1 + 1e-5) + 1e-30


def legacy_bound(x: np.ndarray, qtype: Q) -> np.ndarray:
    amax = np.abs(x).max(-1, keepdims=True)
    lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
    f16 = 2.0**-11
    if qtype == Q.Q8_0:
        b = amax / 127 * (0.5 + 127 * f16) + 127 * F16_NEAR
    elif qtype in (Q.Q4_0, Q.Q5_0):
        top = 8 if qtype == Q.Q4_0 else 16
        b = amax / top * (1 + top * f16) + top * F16_NEAR
    elif qtype in (Q.Q4_1, Q.Q5_1):
        levels = 15 if qtype == Q.Q4_1 else 31
        b = (hi - lo) / levels * (0.5 + levels * f16) + np.abs(lo) * f16 + (levels + 1) * F16_NEAR
    elif qtype == Q.BF16:
        b = np.abs(x) * 2.0**-8
    elif qtype == Q.F16:
        b = np.maximum(np.abs(x) * f16, 2.0**-25)
    else:
        b = np.zeros_like(x)
    return np.broadcast_to(b, x.shape) * (1 + 1e-5) + 1e-30


@pytest.mark.parametrize("kind", tiny_quants.TYPES)
def test_quantized_blocks_dequantize_within_the_stated_bound(kind: str) -> None:
    qtype = tiny_quants.TYPES[kind]
    x = weights_with_edge_cases(512)
    packed = tiny_quants.quantize(x, qtype)
    back = quants.dequantize(packed, qtype).reshape(x.shape)  # gguf-py reads our bytes
    size, _ = GGML_QUANT_SIZES[qtype]
    rows = x.reshape(-1, size)
    bound = (
        k_bound(rows, qtype) if qtype in tiny_quants.K_QUANTIZERS else legacy_bound(rows, qtype)
    ).reshape(x.shape)
    err = np.abs(back - x)
    worst = np.unravel_index(np.argmax(err - bound), x.shape)
    assert (err <= bound).all(), f"{kind}: |err| {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
    assert (back[0] == 0).all(), f"{kind}: an all-zero row does not come back as zeros"
    # not vacuous: the error is a real quantization error, not zero, for the lossy types
    if kind != "f32":
        assert err.max() > 0


@pytest.mark.parametrize("kind", ["q4_k", "q5_k", "q6_k"])
def test_k_quant_error_is_at_most_half_the_stored_step(kind: str) -> None:
    """The construction's own promise, read back from the bytes: every value within half the
    step (d * scale) its sub-block stores — so nothing is clipped at a range's edge."""
    qtype = tiny_quants.TYPES[kind]
    rows, blocks = blocks_of(weights_with_edge_cases(256 * 3), qtype)
    back = quants.dequantize(blocks.reshape(-1), qtype).reshape(rows.shape)
    step = tiny_quants.step_sizes(blocks, qtype)
    assert (np.abs(back - rows) <= step / 2 * (1 + 1e-5) + 1e-30).all()
    # and the step is no wider than the range needs (scales rounded up by at most one unit)
    assert (step <= k_bound(rows, qtype) * 2).all()


def test_k_types_fall_back_where_rows_do_not_fit() -> None:
    """llama.cpp's fallbacks for rows that are not a multiple of 256; 1-D tensors stay F32."""
    assert tiny_quants.tensor_type("q4_k", (64, 256)) == Q.Q4_K
    assert tiny_quants.tensor_type("q4_k", (256, 64)) == Q.Q5_0
    assert tiny_quants.tensor_type("q5_k", (256, 64)) == Q.Q5_1
    assert tiny_quants.tensor_type("q6_k", (256, 64)) == Q.Q8_0
    assert tiny_quants.tensor_type("q8_0", (64,)) == Q.F32


def test_weights_are_a_function_of_the_spec() -> None:
    spec = tiny.FAMILIES["qwen3"]
    a, b = tiny.weights(spec), tiny.weights(spec)
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    other = tiny.weights(tiny.TinySpec(**{**spec.__dict__, "seed": spec.seed + 1}))
    assert not np.array_equal(a["model.norm.weight"], other["model.norm.weight"])


# -- byte-identical files, whose sha256 is the one the snapshots were recorded on ----------------

#: one model of each K quant (the quantizers written here); every model: the slow test below
SAMPLE = ["tiny-qwen2-q4_k", "tiny-qwen3-q5_k", "tiny-qwen2-tied-q6_k"]

#: A fresh interpreter that cannot import torch, transformers or llama.cpp writes the models.
GENERATE = """
import sys
for name in ("torch", "transformers", "llama_cpp", "safetensors"):
    sys.modules[name] = None  # importing them raises ImportError
from pathlib import Path
from specgate.supply import tiny
vocab, out = Path(sys.argv[1]), Path(sys.argv[2])
for model_id in sys.argv[3:]:
    tiny.generate(model_id, out / f"{model_id}.gguf", vocab)
"""


def vocab_gguf() -> Path:
    if tiny.VOCAB_SOURCE not in model_cache.cached_models():
        model_missing(f"{tiny.VOCAB_SOURCE}, the tiny models' vocabulary (run: specgate models fetch)")
    return model_cache.model_ref(tiny.VOCAB_SOURCE).gguf


def recorded_sha256(model_id: str) -> set[str]:
    """The model sha256 every committed snapshot of ``model_id`` was recorded on."""
    found = {
        json.loads(path.read_text(encoding="utf-8"))["provenance"]["model_sha256"]
        for path in (snapshots.SNAPSHOT_ROOT / model_id).glob("*.json")
    }
    assert found, f"{model_id}: no snapshots"
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def generate_elsewhere(ids: list[str], out: Path, cwd: Path) -> None:
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env.update(PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="2")
    proc = subprocess.run(
        [sys.executable, "-c", GENERATE, str(vocab_gguf()), str(out), *ids],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def check_byte_identical(ids: list[str], tmp_path: Path) -> None:
    """Generated here, the models sharing one ``ArraysPacked`` (as ``specgate models tiny``
    writes them), and elsewhere each on its own: the same bytes, the snapshots' sha256."""
    here = tmp_path / "here"
    here.mkdir()
    vocab = vocab_gguf()
    packed: tiny.ArraysPacked = {}
    for model_id in ids:
        tiny.generate(model_id, here / f"{model_id}.gguf", vocab, packed=packed)
    # the vocabulary's tokens, merges and token types, packed once whatever the model count
    assert len(packed) == 3, f"{len(packed)} long arrays packed for {len(ids)} models"
    (tmp_path / "cwd").mkdir()
    generate_elsewhere(ids, tmp_path / "there", cwd=tmp_path / "cwd")
    for model_id in ids:
        a, b = here / f"{model_id}.gguf", tmp_path / "there" / f"{model_id}.gguf"
        assert a.read_bytes() == b.read_bytes(), f"{model_id}: two generations differ"
        assert {sha256(a)} == recorded_sha256(model_id), (
            f"{model_id}: generated sha256 {sha256(a)} is not the one its snapshots were recorded on "
            f"{recorded_sha256(model_id)}; re-record them (nox -s snapshots -- --model {model_id})"
        )


@pytest.mark.slow  # ~10 s of CPU; the fast tier's gates check every tiny model's sha256 against its snapshots
def test_generation_is_byte_identical_and_matches_the_snapshots(tmp_path: Path) -> None:
    check_byte_identical(SAMPLE, tmp_path)


@pytest.mark.slow
@pytest.mark.applies_to.with_args(is_tiny)
def test_every_tiny_model_is_byte_identical_and_matches_the_snapshots(
    forward_model_id: str, tmp_path: Path
) -> None:
    """Each tiny model (a ``forward_model_id``: the live tier's ``--reference-models`` sample
    keeps four, ``nox -s references`` runs every one: the 27 took 11.5 min of the live tier)."""
    check_byte_identical([forward_model_id], tmp_path)


@pytest.mark.slow
def test_specgate_models_tiny_regenerates_a_file_of_an_older_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache filled by the old transformers + llama.cpp generator (no generator stamp, its
    own sidecar sha256) is written again, not served as if it were these bytes."""
    vocab = vocab_gguf()
    monkeypatch.setenv("SPECGATE_CACHE", str(tmp_path))
    model_id = "tiny-qwen2-q4_k"
    old = tiny.gguf_path(model_id)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"GGUF from an older generator")
    old.with_name(old.name + ".sha256").write_text(sha256(old) + "\n")
    monkeypatch.setattr(tiny, "model_ids", lambda: [model_id])
    assert tiny.generate_all(vocab, log=False) == [model_id]
    assert {sha256(old)} == recorded_sha256(model_id)
    assert tiny.generate_all(vocab, log=False) == []  # now intact: kept


# -- llama.cpp reads the files, and computes what the oracle computes, within the quantized class ---

QUANTIZED_TINY = [m for m in tiny.model_ids() if not m.endswith(("-f32", "-f16", "-bf16"))]
#: a chat turn of the Qwen vocabulary: <|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n
CHAT_IDS = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


@pytest.mark.live
@pytest.mark.parametrize("model_id", QUANTIZED_TINY)
def test_llamacpp_reads_the_blocks_as_the_oracle_does(model_id: str, reference, request) -> None:
    """llama.cpp loads each generated file (it validates every tensor's type and size) and its
    logits agree with the oracle's (gguf-py's dequantization) within the quantized class — the
    class an engine on these files is judged in (specgate.checks.logits)."""
    from impl.oracle import OracleEngine
    from specgate.checks import logit_metrics
    from specgate.checks import logits as class_bounds
    from specgate.supply.models import model_ref

    llama = reference("llamacpp")
    if model_id not in model_cache.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    model = model_ref(model_id)
    cmp = logit_metrics.compare_full(
        np.asarray(OracleEngine().logits(model, CHAT_IDS)),
        np.asarray(llama.logits(model, CHAT_IDS)),
        tie_margin=class_bounds.QUANTIZED_TIE_MARGIN,
    )
    llama.release_forward(model)
    for name, value in cmp.metrics().items():
        request.node.user_properties.append((f"metric:{name}", value))
    assert cmp.kl_mean <= class_bounds.QUANTIZED_KL_MEAN, f"{model_id}: mean KL {cmp.kl_mean:.3g}"
    top1 = 1 - len(cmp.disagreements) / cmp.positions
    assert top1 >= class_bounds.QUANTIZED_TOP1, f"{model_id}: top-1 {top1:.3f}: {cmp.disagreements[:3]}"

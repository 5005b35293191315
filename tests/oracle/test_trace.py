"""The oracle's trace (``oracle.trace.Recorder`` passed to ``Model.prefill``): it only
looks — the logits are bit-identical with and without it — and each recorded point is
what its name says, checked by the relations between points (the residual adds, the
projection after ``kqv_out``, no rotation at position 0, heads head-major)."""

from __future__ import annotations

import numpy as np
import pytest

from oracle import rope
from oracle.forward import rms_norm
from oracle.trace import Recorder, all_points, split_point
from tests.oracle.test_forward import tiny_model

IDS = [151644, 872, 198, 10234, 374, 279, 12884, 6303]


@pytest.mark.parametrize("model_id", ["tiny-qwen2-f32", "tiny-qwen3-q4_k"])
def test_the_recorder_only_looks_and_points_are_what_they_name(model_id: str) -> None:
    model = tiny_model(model_id)
    hp, w = model.hparams, model.weights
    plain = model.prefill(IDS)
    model.reset()
    recorder = Recorder(all_points(hp.n_layer))
    traced = model.prefill(IDS, trace=recorder)
    assert np.array_equal(plain, traced)
    got = recorder.values
    assert set(got) == set(all_points(hp.n_layer)) and np.array_equal(got["result_output"], traced)
    assert np.array_equal(got["inp_embd"], w.rows("token_embd.weight", np.array(IDS)))
    previous = got["inp_embd"]
    for i in range(hp.n_layer):
        assert np.allclose(
            got[f"attn_norm-{i}"], rms_norm(previous, w.get(f"blk.{i}.attn_norm.weight"), hp.rms_eps)
        )
        attn = w.matmul(got[f"kqv_out-{i}"], f"blk.{i}.attn_output.weight")
        assert np.allclose(got[f"ffn_inp-{i}"], previous + attn, atol=1e-5)
        assert np.allclose(got[f"l_out-{i}"], got[f"ffn_inp-{i}"] + got[f"ffn_out-{i}"], atol=1e-5)
        # position 0 is not rotated: Kcur there is the projection (+ bias, + qwen3's k-norm), head-major
        k0 = w.matmul(got[f"attn_norm-{i}"][:1], f"blk.{i}.attn_k.weight")
        if f"blk.{i}.attn_k.bias" in w:
            k0 = k0 + w.get(f"blk.{i}.attn_k.bias")
        k0 = k0.reshape(hp.n_head_kv, hp.head_dim)
        if model.architecture == "qwen3":
            k0 = rms_norm(k0, w.get(f"blk.{i}.attn_k_norm.weight"), hp.rms_eps)
        assert np.allclose(got[f"Kcur-{i}"][0], k0.reshape(-1), atol=1e-5)
        assert got[f"Qcur-{i}"].shape == (len(IDS), hp.n_head * hp.head_dim)
        previous = got[f"l_out-{i}"]
    assert np.allclose(got["result_norm"], rms_norm(previous, w.get("output_norm.weight"), hp.rms_eps))
    model.reset()


def test_later_positions_are_rotated() -> None:
    model = tiny_model("tiny-qwen2-f32")
    recorder = Recorder(["Qcur-0", "attn_norm-0"])
    model.prefill(IDS[:3], trace=recorder)
    hp, w = model.hparams, model.weights
    q = w.matmul(recorder.values["attn_norm-0"], "blk.0.attn_q.weight") + w.get("blk.0.attn_q.bias")
    q = q.reshape(3, hp.n_head, hp.head_dim).transpose(1, 0, 2)
    cos, sin = rope.rope_angles(np.arange(3), hp.head_dim, hp.rope_base)
    expected = rope.apply_rope(q, cos, sin).transpose(1, 0, 2).reshape(3, -1)
    assert np.allclose(recorder.values["Qcur-0"], expected, atol=1e-5)
    model.reset()


def test_unknown_points_are_named() -> None:
    assert split_point("Kcur-12") == ("Kcur", 12) and split_point("result_output") == ("result_output", None)
    for bad in ("Kcur", "q_proj-0", "inp_embd-0", "Kcur-x"):
        with pytest.raises(ValueError, match=f"unknown trace point {bad!r}"):
            split_point(bad)

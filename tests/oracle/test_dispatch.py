"""Model dispatch on small GGUFs written by gguf-py: what is read, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.dispatch import UnsupportedModel, dispatch, read_spec
from oracle.gguf import open_gguf
from tests.ggufs import QWEN2_HPARAMS, write_gguf

MODEL = "tiny-qwen2-f32"  # the runnable model of the read-once test (``tiny_model``)


def spec(tmp_path, **kw):
    return dispatch(open_gguf(write_gguf(tmp_path / "m.gguf", **kw)))


def test_qwen2_reads_hparams_and_tied_embeddings(tmp_path):
    s = spec(tmp_path)
    h = s.hparams
    assert (s.architecture, h.n_layer, h.n_embd, h.n_head, h.n_head_kv) == ("qwen2", 2, 64, 4, 2)
    assert h.head_dim == 64 // 4
    assert h.tied_embeddings is True  # token_embd.weight only: no output.weight
    assert h.rms_eps == pytest.approx(1e-6) and h.rope_base == 1e6


def test_output_weight_present_means_untied(tmp_path):
    tensors = {
        "token_embd.weight": np.ones((6, 64), np.float32),
        "output.weight": np.ones((6, 64), np.float32),
    }
    assert spec(tmp_path, tensors=tensors).hparams.tied_embeddings is False


def test_qwen3_head_dim_comes_from_key_length_not_quotient(tmp_path):
    hp = {**QWEN2_HPARAMS, "attention.key_length": 32, "attention.value_length": 32}
    s = spec(tmp_path, arch="qwen3", hparams=hp)
    assert s.hparams.head_dim == 32 != s.hparams.n_embd // s.hparams.n_head


def test_im_end_is_looked_up_and_falls_back_to_eos(tmp_path):
    assert spec(tmp_path).special.im_end == 5
    s = spec(tmp_path, tokens=["a", "b", "ab", "</s>"])
    assert s.special.im_end == s.special.eos == 3
    assert s.special.im_start is None


@pytest.mark.parametrize("arch", ["llama", "qwen2moe", "gpt2"])
def test_unsupported_architecture_is_refused_by_name(tmp_path, arch):
    with pytest.raises(UnsupportedModel, match=rf"unsupported architecture '{arch}'.*qwen2, qwen3"):
        spec(tmp_path, arch=arch)


def test_bad_head_counts_are_refused(tmp_path):
    with pytest.raises(UnsupportedModel, match="not a multiple"):
        spec(tmp_path, hparams={**QWEN2_HPARAMS, "attention.head_count_kv": 3})


def test_missing_required_key_is_named(tmp_path):
    hp = {k: v for k, v in QWEN2_HPARAMS.items() if k != "attention.layer_norm_rms_epsilon"}
    with pytest.raises(UnsupportedModel, match="layer_norm_rms_epsilon"):
        spec(tmp_path, hparams=hp)


def test_eos_outside_vocabulary_is_refused(tmp_path):
    with pytest.raises(UnsupportedModel, match="outside the vocabulary"):
        spec(tmp_path, extra={"tokenizer.ggml.padding_token_id": 999})


def test_a_file_is_read_once_however_many_models_it_makes(tiny_model, monkeypatch):
    """A ``Model`` per session (the diagnosis' sessions with knobs) reads the spec the
    file's first ``dispatch`` read: the header is not walked again for each."""
    from oracle import dispatch as dispatch_module
    from oracle.forward import Model

    reads = []
    monkeypatch.setattr(dispatch_module, "read_spec", lambda g: reads.append(g) or read_spec(g))
    gguf = open_gguf(tiny_model.gguf)
    models = [Model(gguf) for _ in range(3)]
    assert reads == [gguf]
    assert models[0].hparams == models[2].hparams == read_spec(gguf).hparams
    other = open_gguf(tiny_model.gguf)  # another parse of the file reads it again
    assert dispatch(other) == dispatch(gguf) and reads == [gguf, other]


def test_a_refused_file_is_refused_again(tmp_path):
    gguf = open_gguf(write_gguf(tmp_path / "m.gguf", arch="llama"))
    for _ in range(2):  # a refusal is not remembered as a spec
        with pytest.raises(UnsupportedModel, match="unsupported architecture 'llama'"):
            dispatch(gguf)

"""The hf adapter builds transformers' tokenizer from a GGUF once per model and session:
the tokenizer and render stages share it (each load of a 150k vocabulary takes ~20 s)."""

from __future__ import annotations

import contextlib

import pytest

from impl.protocol import Unsupported
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.supply.models import model_ref

transformers = pytest.importorskip("transformers")
GGUF_ONLY_MODEL = "tiny-qwen3-f32"  # ships no tokenizer.json / tokenizer_config.json


@pytest.mark.live  # builds transformers' tokenizer from a 150k-token GGUF (~12 s)
def test_tokenizer_and_render_stages_share_one_transformers_tokenizer(monkeypatch):
    from impl.hf.engine import HFEngine

    try:
        model = model_ref(GGUF_ONLY_MODEL)
    except model_cache.ModelError as exc:  # a partial local cache skips; under --live-references it fails
        model_missing(f"{GGUF_ONLY_MODEL}: {exc}")
    assert model.tokenizer_json is None and model.tokenizer_config is None
    real_load = transformers.AutoTokenizer.from_pretrained.__func__
    loads: list[str] = []

    def counted_load(cls, *args, **kwargs):
        loads.append(kwargs.get("gguf_file", ""))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(counted_load))
    hf = HFEngine()
    ids = hf.encode(model, "hello world", parse_special=False)
    assert hf.decode(model, ids) == b"hello world"
    with contextlib.suppress(Unsupported):  # a GGUF without a chat template is refused after the load
        hf.render(model, [{"role": "user", "content": "hi"}])
    hf.encode(model, "again", parse_special=True)
    assert loads == [model.gguf.name]

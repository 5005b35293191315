"""The weights store (``oracle.weights_store``): a model dequantized once per machine.

A load through a store must give the store-less forward's logits bit for bit, the
second load must dequantize nothing it stored, and a stored file that is not exactly
the expected array, another model's bytes, or a store that cannot be written must
never change an answer — only what it costs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oracle.forward import Model
from oracle.gguf import open_gguf
from oracle.weights_store import MIN_BYTES, WeightsStore
from specgate.plugin import model_missing
from specgate.supply import models

MODELS = ["tiny-qwen2-q4_0", "tiny-qwen3-q4_k"]
IDS = [int(x) for x in np.random.default_rng(11).integers(0, 151_643, 12)]


def gguf_path(model_id: str) -> Path:
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    return models.model_ref(model_id).gguf


def stored_matrices(path: Path, min_bytes: int) -> int:
    """How many of the model's matrices the forward keeps transposed and a store holds:
    the 2-D weights it multiplies (every layer's seven, and the output projection: the
    token embedding when tied), of at least ``min_bytes`` in float32."""
    g = open_gguf(path)
    multiplied = [n for n, t in g.tensors.items() if len(t.shape) == 2 and n != "token_embd.weight"]
    multiplied.append("output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    return sum(1 for n in set(multiplied) if int(np.prod(g.tensors[n].shape)) * 4 >= min_bytes)


def logits(path: Path, store: WeightsStore | None) -> tuple[np.ndarray, Model]:
    model = Model.from_gguf(path, store=store)
    return model.prefill(IDS), model


@pytest.mark.parametrize("model_id", MODELS)
def test_a_stored_model_gives_the_plain_logits_bit_for_bit_and_dequantizes_once(
    model_id: str, tmp_path: Path
) -> None:
    path = gguf_path(model_id)
    plain, _ = logits(path, None)
    first_store = WeightsStore(tmp_path, min_bytes=0)  # every matrix: the tiny models' are small
    first, _ = logits(path, first_store)
    expected = stored_matrices(path, 0)
    assert expected >= 7, "every layer's matrices and the output projection"
    assert (first_store.hits, first_store.writes, first_store.failed_writes) == (0, expected, 0)
    second_store = WeightsStore(tmp_path, min_bytes=0)
    second, model = logits(path, second_store)
    assert (second_store.hits, second_store.writes) == (expected, 0)
    assert any(isinstance(w, np.memmap) for w in model.weights._transposed.values())
    assert np.array_equal(first, plain) and np.array_equal(second, plain)


def test_a_damaged_or_misshapen_stored_file_is_a_miss_and_is_written_again(tmp_path: Path) -> None:
    path = gguf_path("tiny-qwen2-q4_0")
    plain, _ = logits(path, None)
    logits(path, WeightsStore(tmp_path, min_bytes=0))
    files = sorted(tmp_path.rglob("*.npy"))
    truncated, misshapen = files[0], files[1]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    np.save(misshapen, np.zeros((3, 5), dtype=np.float32))
    store = WeightsStore(tmp_path, min_bytes=0)
    again, _ = logits(path, store)
    assert (store.hits, store.writes) == (len(files) - 2, 2)
    assert np.array_equal(again, plain)
    assert WeightsStore(tmp_path).load(WeightsStore.key(0, (1,), np.zeros(4, np.uint8)), (1, 1)) is None


def test_another_content_is_another_name() -> None:
    raw = np.arange(64, dtype=np.uint8)
    key = WeightsStore.key(8, (4, 32), raw)
    changed = raw.copy()
    changed[17] ^= 1
    assert len({key, WeightsStore.key(8, (4, 32), changed), WeightsStore.key(2, (4, 32), raw),
                WeightsStore.key(8, (8, 16), raw)}) == 4  # fmt: skip
    assert WeightsStore.key(8, (4, 32), raw.copy()) == key


def test_a_store_that_cannot_be_written_costs_time_never_an_answer(tmp_path: Path) -> None:
    path = gguf_path("tiny-qwen2-q4_0")
    plain, _ = logits(path, None)
    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("x")
    store = WeightsStore(blocked)  # the default threshold: a tiny model's output projection only
    got, _ = logits(path, store)
    assert store.writes == 0 and store.failed_writes == stored_matrices(path, MIN_BYTES) == 1
    assert np.array_equal(got, plain)
    assert not list(tmp_path.rglob("*.part")), "no half-written file left behind"

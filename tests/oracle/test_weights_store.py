"""The weights store (``oracle.weights_store``): a model dequantized once per machine.

A load through a store must give the store-less forward's logits bit for bit, the
second load must dequantize nothing it stored, and a stored file that is not exactly
the expected array, another model's bytes, or a store that cannot be written must
never change an answer — only what it costs.
"""

from __future__ import annotations

import os
import time
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
    first, first_model = logits(path, first_store)
    # the first load too holds every kept matrix mapped back from its file, not as its own copy
    assert all(isinstance(w, np.memmap) for w in first_model.weights._transposed.values())
    expected = stored_matrices(path, 0)
    assert expected >= 7, "every layer's matrices and the output projection"
    assert (first_store.hits, first_store.writes, first_store.failed_writes) == (0, expected, 0)
    second_store = WeightsStore(tmp_path, min_bytes=0)
    second, model = logits(path, second_store)
    assert (second_store.hits, second_store.writes) == (expected, 0)
    assert all(isinstance(w, np.memmap) for w in model.weights._transposed.values())
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
    assert (
        WeightsStore(tmp_path).load(WeightsStore.key(0, (1,), np.zeros(4, np.uint8), np.zeros(1)), (1, 1))
        is None
    )


def test_another_content_or_dequantization_is_another_name() -> None:
    raw, row = np.arange(64, dtype=np.uint8), np.linspace(-1, 1, 32, dtype=np.float32)
    key = WeightsStore.key(8, (4, 32), raw, row)
    changed, other_row = raw.copy(), row.copy()
    changed[17] ^= 1
    other_row[3] = np.nextafter(other_row[3], np.float32(2))
    assert len({key, WeightsStore.key(8, (4, 32), changed, row), WeightsStore.key(2, (4, 32), raw, row),
                WeightsStore.key(8, (8, 16), raw, row), WeightsStore.key(8, (4, 32), raw, other_row)}) == 5  # fmt: skip
    assert WeightsStore.key(8, (4, 32), raw.copy(), row.copy()) == key


def test_a_process_with_another_dequantization_neither_reads_nor_poisons_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test's planted dequantization bug (``tests/engines/mutants/forward_bugs.py
    q4_0_interleaved`` patches gguf-py's ``quants.dequantize`` in its engine process) must
    not read the store's right matrices, nor leave its wrong ones for the oracle."""
    from gguf import quants
    from gguf.constants import GGMLQuantizationType as T

    path = gguf_path("tiny-qwen2-q4_0")
    plain, _ = logits(path, WeightsStore(tmp_path, min_bytes=0))  # the store holds the right matrices
    right = quants.dequantize

    def interleaved(data: np.ndarray, qtype: T) -> np.ndarray:
        out = right(data, qtype)
        return out if qtype != T.Q4_0 else out.reshape(-1, 2, 16).transpose(0, 2, 1).reshape(out.shape)

    monkeypatch.setattr(quants, "dequantize", interleaved)
    planted, _ = logits(path, None)
    patched_store = WeightsStore(tmp_path, min_bytes=0)
    through_store, _ = logits(path, patched_store)
    assert not np.array_equal(planted, plain), "the planted bug must change the logits"
    assert np.array_equal(through_store, planted) and patched_store.hits == 0
    monkeypatch.setattr(quants, "dequantize", right)
    again_store = WeightsStore(tmp_path, min_bytes=0)
    again, _ = logits(path, again_store)
    assert np.array_equal(again, plain) and again_store.writes == 0


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


def test_the_store_is_bounded_and_keeps_what_was_used_last(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = WeightsStore(tmp_path, min_bytes=0, max_bytes=3 * 4096 * 4 + 3 * 4096)  # three 64x64 files fit
    keys = []
    for i in range(3):
        keys.append(WeightsStore.key(0, (64, 64), np.full(8, i, np.uint8), np.zeros(64)))
        store.save(keys[-1], rng.standard_normal((64, 64), dtype=np.float32))
    old = time.time() - 100
    for n, key in enumerate(keys):  # written in this order, long ago
        os.utime(store.path(key), (old + n, old + n))
    assert store.load(keys[0], (64, 64)) is not None  # used again: now the most recent
    fourth = WeightsStore.key(0, (64, 64), np.full(8, 9, np.uint8), np.zeros(64))
    store.save(fourth, rng.standard_normal((64, 64), dtype=np.float32))
    present = [store.path(k).exists() for k in (*keys, fourth)]
    assert present == [True, False, True, True], present  # the least recently used went
    assert sum(p.stat().st_size for p in tmp_path.rglob("*.npy")) <= store.max_bytes

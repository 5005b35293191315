"""Reused memory for the output projection (``oracle.recycled``): an array anybody holds
is never written over, one nobody holds is written into again, and the forward's logits
read the same either way."""

from __future__ import annotations

import weakref

import numpy as np

from oracle.forward import Model
from oracle.recycled import RecycledArrays

MODEL = "tiny-qwen2-f32"  # 151,936 outputs: its prompts' logits take the reused path (``tiny_model``)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_an_array_let_go_of_is_handed_out_again():
    arrays = RecycledArrays()
    first = arrays.empty((4, 5))
    at = address(first)
    del first
    again = arrays.empty((3, 5))  # smaller fits in the same memory
    assert address(again) == at and again.shape == (3, 5) and again.dtype == np.float32


def test_a_held_array_or_view_is_never_written_over():
    arrays = RecycledArrays()
    held = arrays.empty((4, 5))
    held[:] = 1
    other = arrays.empty((4, 5))
    other[:] = 2
    assert not np.shares_memory(held, other) and (held == 1).all()
    row = other[-1]  # only a view of it is kept
    del other
    third = arrays.empty((4, 5))
    third[:] = 3
    assert not np.shares_memory(row, third) and (row == 2).all()


def test_a_larger_request_gets_new_memory_and_big_arrays_are_not_kept():
    arrays = RecycledArrays(retained_bytes=100)
    small = arrays.empty((2, 5))
    del small
    big = arrays.empty((5, 5))  # 100 bytes: kept
    big_memory = weakref.ref(big.base)
    del big
    assert big_memory() is not None
    bigger = arrays.empty((6, 5))  # 120 bytes: handed out, not remembered
    bigger_memory = weakref.ref(bigger.base)
    assert big_memory() is None  # the smaller one was let go of, not kept beside it
    del bigger
    assert bigger_memory() is None


def test_logits_held_across_prefills_keep_their_values(tiny_model):
    model = Model.from_gguf(tiny_model.gguf)
    rng = np.random.default_rng(3)
    first_ids, second_ids = (rng.integers(0, 151_000, 24).tolist() for _ in range(2))
    first = model.prefill(first_ids)
    kept = first.copy()
    model.reset()
    second = model.prefill(second_ids)
    assert np.array_equal(first, kept)  # held: the second prefill wrote elsewhere
    assert not np.array_equal(first, second)
    second_values, second_at = second.copy(), address(second)
    del second
    model.reset()
    again = model.prefill(second_ids)  # the second's memory, let go of, is written into again
    assert address(again) == second_at and np.array_equal(again, second_values)

"""Model weights as float32, dequantized lazily from the GGUF within a memory budget.

A GGUF stores most matrices quantized (Q4_K, Q8_0, ...). The forward pass wants
float32, but dequantizing a whole model up front would need ~4 bytes per
parameter — 28 GB for a 7B model. So weights stay in the memory-mapped file and
are dequantized on use:

* a tensor that fits in the remaining ``budget`` is dequantized once and kept — a
  matrix the forward multiplies (``matmul``) kept transposed, [in, out], contiguous:
  the layout in which a block of tokens multiplies it fastest;
* a tensor that does not fit is streamed: its rows are dequantized block by block
  and multiplied immediately, so at most one block (``STREAM_BLOCK_BYTES``) of it
  exists in float32 at any time;
* the token embedding is never dequantized whole: only the rows of the tokens
  being embedded.

Cached tensors are kept in first-use order and never evicted. The forward pass
touches the tensors cyclically (layer 0 .. N-1, output, again), a pattern for
which least-recently-used eviction would evict every tensor just before it is
needed again; keeping a fixed set and streaming the rest gives the best hit rate
a fixed budget can give. Peak memory is thus the mapped file + ``budget`` + one
block + activations.

With a ``WeightsStore`` (``oracle.weights_store``) a kept matrix is dequantized once per
machine: later loads map the stored ``Wᵀ`` read-only instead of computing it again.

Dequantization is gguf-py's (``GGUFFile.dequantize`` / ``gguf.quants``); which
tensor types the oracle accepts is decided here, at load, by name.
"""

from __future__ import annotations

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

from oracle.gguf import GGUFFile
from oracle.recycled import RecycledArrays
from oracle.weights_store import WeightsStore

SUPPORTED_TYPES = frozenset(
    {T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K}
)
DEFAULT_BUDGET_BYTES = 2 << 30  # keeps every weight of a 0.5B model; a 7B model streams most
STREAM_BLOCK_BYTES = 64 << 20
TRANSPOSE_ROWS = 1024  # rows dequantized and transposed at a time into a kept matrix
WIDE_OUTPUT = 32768  # output columns from which a block of rows goes as (W xᵀ)ᵀ (see ``matmul``)


class UnsupportedTensorType(ValueError):
    """A tensor's ggml type is not one the oracle dequantizes."""


def check_types(gguf: GGUFFile, names: list[str]) -> None:
    """Refuse, by tensor and type name, any tensor the oracle cannot dequantize."""
    bad = [
        f"{n} ({gguf.tensors[n].type_name})"
        for n in names
        if gguf.tensors[n].ggml_type not in SUPPORTED_TYPES
    ]
    if bad:
        supported = ", ".join(sorted(t.name for t in SUPPORTED_TYPES))
        raise UnsupportedTensorType(
            f"{gguf.path}: unsupported tensor type for {', '.join(bad[:5])}"
            f"{' …' if len(bad) > 5 else ''}; the oracle supports {supported}"
        )


class Weights:
    """The float32 view of a GGUF's tensors, dequantized on demand."""

    def __init__(
        self, gguf: GGUFFile, budget_bytes: int = DEFAULT_BUDGET_BYTES, store: WeightsStore | None = None
    ) -> None:
        self.gguf = gguf
        self.budget_bytes = budget_bytes
        self.store = store  # kept matrices read from / written to disk (``oracle.weights_store``)
        self.cached_bytes = 0
        self._cache: dict[str, np.ndarray] = {}  # as stored: [out, in] for a matrix
        self._transposed: dict[str, np.ndarray] = {}  # matrices multiplied by ``matmul``: [in, out]
        self.wide_products = RecycledArrays()  # the memory of the last vocabulary-wide product

    def __contains__(self, name: str) -> bool:
        return name in self.gguf.tensors

    def get(self, name: str) -> np.ndarray:
        """The whole tensor in float32 (kept if it fits in the budget)."""
        if name in self._cache:
            return self._cache[name]
        if name in self._transposed:
            return self._transposed[name].T  # the same numbers, read through the kept [in, out] copy
        w = self.gguf.dequantize(name)
        if self.cached_bytes + w.nbytes <= self.budget_bytes:
            w = np.ascontiguousarray(w)
            self._cache[name] = w
            self.cached_bytes += w.nbytes
        return w

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of a 2-D tensor, dequantizing only those rows (embedding lookup)."""
        if name in self._cache:
            return self._cache[name][ids]
        if name in self._transposed:
            return np.ascontiguousarray(self._transposed[name][:, ids].T)
        info = self.gguf.tensors[name]
        raw = self.gguf.tensor_bytes(name).reshape(info.shape[0], -1)[ids]
        return quants.dequantize(raw, T(info.ggml_type)).astype(np.float32, copy=False)

    def transposed(self, name: str) -> np.ndarray | None:
        """A 2-D weight ``W`` [out, in] as a contiguous float32 ``Wᵀ`` [in, out], dequantized
        once and kept if it fits in the budget; None if it does not."""
        if name in self._transposed:
            return self._transposed[name]
        info = self.gguf.tensors[name]
        f32_bytes = int(np.prod(info.shape)) * 4
        if name in self._cache or self.cached_bytes + f32_bytes > self.budget_bytes:
            return None
        if self.store is not None and f32_bytes >= self.store.min_bytes:
            raw, first_row = self.gguf.tensor_bytes(name), self.gguf.dequantize_rows(name, 0, 1)
            key = self.store.key(info.ggml_type, info.shape, raw, first_row)
            wt = self.store.load(key, (info.shape[1], info.shape[0]))
            if wt is None:
                wt = self.store.save(key, self.dequantize_transposed(name))  # mapped back if stored
        else:
            wt = self.dequantize_transposed(name)
        self._transposed[name] = wt
        self.cached_bytes += wt.nbytes
        self.gguf.release_pages(name)  # kept in float32: its quantized bytes need not stay resident
        return wt

    def dequantize_transposed(self, name: str) -> np.ndarray:
        """``Wᵀ`` [in, out] of a 2-D weight, float32, C-contiguous: dequantized and transposed
        a block of rows at a time into the new array, with no whole-matrix temporary (on the
        0.5B each one was 2 GB more of fresh pages per load)."""
        info = self.gguf.tensors[name]
        wt = np.empty((info.shape[1], info.shape[0]), dtype=np.float32)
        for start in range(0, info.shape[0], TRANSPOSE_ROWS):
            wt[:, start : start + TRANSPOSE_ROWS] = self.gguf.dequantize_rows(
                name, start, start + TRANSPOSE_ROWS
            ).T
        return wt

    def matmul(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x @ W.T`` for a weight ``W`` stored as [out, in] (GGUF ne = [in, out]).

        A kept ``W`` is kept as ``Wᵀ`` [in, out], contiguous: ``x`` [T, in] multiplies it
        with no transposed operand (measured with 2 OpenBLAS threads on [512, 896] x
        [896, 9728]: 59 ms, against 106 ms for ``(W @ xᵀ)ᵀ`` on the [out, in] layout; a
        decode step's [1, 896] product 5.9 against 7.9 ms). For a block of rows against a
        vocabulary-wide ``Wᵀ`` (the output projection) ``(Wᵀᵀ xᵀ)ᵀ`` is the faster order
        (935 against 1,870 ms at [512, 896] x [896, 151936]); it returns a column-major
        [T, out] view, written into the last such product's memory when nobody holds that
        any more (``oracle.recycled``: fresh pages cost a third more here)."""
        wt = self.transposed(name)
        if wt is not None:
            if x.ndim == 2 and x.shape[0] > 8 and wt.shape[1] >= WIDE_OUTPUT:
                return np.matmul(wt.T, x.T, out=self.wide_products.empty((wt.shape[1], x.shape[0]))).T
            return x @ wt
        info = self.gguf.tensors[name]
        f32_bytes = int(np.prod(info.shape)) * 4
        if name in self._cache or f32_bytes <= STREAM_BLOCK_BYTES:
            return (self.get(name) @ x.T).T
        out_rows = info.shape[0]
        block = max(1, STREAM_BLOCK_BYTES // (4 * info.shape[1]))
        raw = self.gguf.tensor_bytes(name).reshape(out_rows, -1)
        out = np.empty((*x.shape[:-1], out_rows), dtype=np.float32)
        for start in range(0, out_rows, block):
            w = quants.dequantize(raw[start : start + block], T(info.ggml_type)).astype(
                np.float32, copy=False
            )
            out[..., start : start + block] = x @ w.T
        return out

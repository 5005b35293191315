"""Quantizers for every tensor type of the tiny models, in plain numpy.

gguf-py (``gguf.quants``) quantizes BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1; F32 and F16
are plain casts. It only *de*quantizes the K quants, so Q4_K, Q5_K and Q6_K are
written here, following ggml's block layouts (``block_q4_K`` etc. in ggml-common.h,
as gguf-py's dequantizers read them). The scales are chosen by a simple rule that is
deterministic and provably bounded, not by llama.cpp's iterative search
(``make_qkx2_quants``): the blocks are valid — any reader decodes them — but not
bit-identical to what ``llama-quantize`` would write.

The rule, per sub-block, for every K type: pick the sub-block's real step (the
smallest that covers its range with the type's levels), round the block's f16 super
scale *up*, round each sub-block's integer scale *up*, so the stored step is never
smaller than the needed one and every value lies inside the representable range.
Each value is then rounded to the nearest level, so its error is at most half the
stored step of its sub-block: ``|x - dequantized| <= step / 2`` (``step`` = d * sc),
plus float32 rounding. ``tests/supply/test_tiny_models.py`` checks that bound on every
element, through gguf-py's own dequantizer.

A K type needs rows that are a multiple of 256 values (QK_K). A tensor whose rows are
not gets the legacy type llama.cpp's quantizer falls back to (``K_FALLBACK``).
"""

from __future__ import annotations

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, QK_K, GGMLQuantizationType

Q = GGMLQuantizationType

#: type name of the tiny catalogue -> ggml type
TYPES = {
    "f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1,
    "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K,
}  # fmt: skip
#: what llama.cpp's quantizer writes instead of a K type when a row is not a multiple of QK_K
K_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}


def tensor_type(kind: str, shape: tuple[int, ...]) -> GGMLQuantizationType:
    """The type a tensor of ``shape`` gets in a tiny model of type ``kind``: 1-D tensors
    (norms, biases) stay F32, as in llama.cpp; a K type falls back where rows don't fit."""
    qtype = TYPES[kind]
    if len(shape) == 1:
        return Q.F32
    if qtype in K_FALLBACK and shape[-1] % QK_K:
        return K_FALLBACK[qtype]
    return qtype


def quantize(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """``data`` (float32, rows last) as ``qtype``: float arrays for F32/F16, else the raw
    blocks as uint8 with the byte shape gguf-py expects (``quant_shape_to_byte_shape``)."""
    data = np.ascontiguousarray(data, dtype=np.float32)
    if qtype in K_QUANTIZERS:
        rows = data.reshape(-1, QK_K)
        blocks = K_QUANTIZERS[qtype](rows)
        assert blocks.shape[1] == GGML_QUANT_SIZES[qtype][1]
        return blocks.reshape(quants.quant_shape_to_byte_shape(data.shape, qtype))
    return quants.quantize(data, qtype)


# -- helpers ----------------------------------------------------------------------------------


def f16_up(x: np.ndarray) -> np.ndarray:
    """The smallest float16 >= ``x`` (x >= 0), as float16: a super scale rounded up."""
    x = np.asarray(x, dtype=np.float32)
    h = x.astype(np.float16)
    low = h.astype(np.float32) < x
    return np.where(low, np.nextafter(h, np.float16(np.inf)), h).astype(np.float16)


def int_scales(needed: np.ndarray, d: np.ndarray, top: int) -> np.ndarray:
    """Integer sub-block scales ``sc`` with ``d * sc >= needed`` (rounded up), in 0..top."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.ceil(needed / d.astype(np.float32))
    return np.clip(np.nan_to_num(sc, nan=0.0, posinf=top), 0, top).astype(np.uint8)


def levels(x: np.ndarray, step: np.ndarray, offset: np.ndarray, top: int) -> np.ndarray:
    """Nearest level ``q`` in 0..top of ``x ≈ step * q - offset`` (0 where step is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint((x + offset) / step)
    return np.clip(np.nan_to_num(q, nan=0.0, posinf=0.0, neginf=0.0), 0, top).astype(np.uint8)


def pack_scale_min_k4(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 12 scale bytes holding eight 6-bit scales and eight 6-bit mins:
    bytes 0-3 = sc[0:4] | top bits of sc[4:8]; 4-7 = m[0:4] | top bits of m[4:8];
    8-11 = low nibbles of sc[4:8] | low nibbles of m[4:8] << 4 (ggml's get_scale_min_k4)."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return out


def f16_bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype(np.float16).reshape(-1, 1)).view(np.uint8)


# -- the K quants -----------------------------------------------------------------------------


def affine_k(rows: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's rule: 8 sub-blocks of 32, ``x ≈ d*sc[j]*q - dmin*m[j]``, q in 0..top.
    Returns (d, dmin, sc, m, q) with q shaped (blocks, 8, 32)."""
    sub = rows.reshape(-1, 8, 32)
    offset = np.maximum(-sub.min(axis=-1), 0)  # the sub-block's min below zero, as a positive offset
    dmin = f16_up(offset.max(axis=-1) / 63)
    m = int_scales(offset, dmin[:, None], 63)
    stored_offset = dmin.astype(np.float32)[:, None] * m  # >= offset: the min is representable
    span = sub.max(axis=-1) + stored_offset  # what top levels above -stored_offset must reach
    d = f16_up(np.maximum(span, 0).max(axis=-1) / (top * 63))
    sc = int_scales(np.maximum(span, 0) / top, d[:, None], 63)
    step = d.astype(np.float32)[:, None] * sc.astype(np.float32)
    q = levels(sub, step[..., None], stored_offset[..., None], top)
    return d, dmin, sc, m, q


def quantize_q4_k(rows: np.ndarray) -> np.ndarray:
    """block_q4_K (144 bytes): d, dmin (f16), scales[12], qs[128]; qs byte 32*g + l holds
    sub-block 2g's value l in its low nibble and sub-block 2g+1's in its high nibble."""
    d, dmin, sc, m, q = affine_k(rows, 15)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scale_min_k4(sc, m), qs], axis=1)


def quantize_q5_k(rows: np.ndarray) -> np.ndarray:
    """block_q5_K (176 bytes): d, dmin, scales[12], qh[32], qs[128]; the low 4 bits as in
    Q4_K, bit 4 of sub-block j's value l is bit j of qh byte l."""
    d, dmin, sc, m, q = affine_k(rows, 31)
    low = q & 0x0F
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(-1, 128)
    high = (q >> 4) & 1  # (blocks, 8, 32)
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= high[:, j, :] << j
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scale_min_k4(sc, m), qh, qs], axis=1)


def quantize_q6_k(rows: np.ndarray) -> np.ndarray:
    """block_q6_K (210 bytes): ql[128], qh[64], scales[16] (int8), d (f16); 16 sub-blocks
    of 16, ``x ≈ d*scales[k]*(q - 32)``, q in 0..63. Value v = 128h + 64n + l keeps its low
    4 bits in nibble n of ql byte 64h + l; value v = 128h + 32s + l its top 2 bits in bits
    2s..2s+1 of qh byte 32h + l."""
    sub = rows.reshape(-1, 16, 16)
    needed = np.abs(sub).max(axis=-1) / 31  # |q - 32| <= 31: symmetric, q in 1..63
    d = f16_up(needed.max(axis=-1) / 127)
    sc = int_scales(needed, d[:, None], 127)
    step = d.astype(np.float32)[:, None] * sc.astype(np.float32)
    q = levels(sub, step[..., None], 32 * step[..., None], 63).reshape(-1, 2, 128)  # (blocks, h, 128)
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, 0:64] | (low[:, :, 64:128] << 4)).reshape(-1, 128)
    qh = np.zeros((q.shape[0], 2, 32), dtype=np.uint8)
    for s in range(4):
        qh |= high[:, :, 32 * s : 32 * (s + 1)] << (2 * s)
    return np.concatenate([ql, qh.reshape(-1, 64), sc.view(np.int8).view(np.uint8), f16_bytes(d)], axis=1)


K_QUANTIZERS = {Q.Q4_K: quantize_q4_k, Q.Q5_K: quantize_q5_k, Q.Q6_K: quantize_q6_k}


def step_sizes(blocks: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """The stored step (d * sc) of every value of K-quant ``blocks`` (uint8, one block a row),
    read back from the bytes — what the error bound ``step / 2`` is stated in."""
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32) if qtype != Q.Q6_K else None
    if qtype in (Q.Q4_K, Q.Q5_K):
        sc, _ = quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())
        return np.repeat(d * sc.astype(np.float32), 32, axis=1)
    sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)
    return np.repeat(d * sc, 16, axis=1)

"""Where a forward pass's temporaries live: freed blocks kept for the next layer's use.

A prefill allocates and frees the same arrays in every layer — normed activations,
queries, keys, values, scores, the FFN's [T, n_ff] gate and up products — and the
logits once. glibc's malloc hands a block above its mmap threshold (128 KiB, raised
on the fly to the largest block freed, at most 32 MiB) out as fresh pages and gives
them back on ``free``, and it returns free memory at the top of the heap beyond its
trim threshold to the kernel; either way the next layer's array of the same size
faults in newly zeroed pages. Measured on the 0.5B model's 512-token prefill (2 BLAS
threads): ~84,000 page faults and ~0.6 s of kernel time per pass, ~10 % of its wall
time (``benchmarks/bench_forward.py``).

``keep_freed_memory`` sets both thresholds (``mallopt``): blocks up to
``MMAP_THRESHOLD_BYTES`` come from the heap, and up to ``TRIM_THRESHOLD_BYTES`` of
free heap stays mapped, so the second layer reuses the first layer's pages. Nothing
computed changes — only which pages hold the numbers. It is process-wide and
idempotent; on a C library without ``mallopt`` (not glibc) it does nothing.

What it costs: a process keeps up to ``TRIM_THRESHOLD_BYTES`` (512 MiB) of freed
memory resident after a pass, instead of giving it back — reused by the next pass. A block
above ``MMAP_THRESHOLD_BYTES`` (the logits of a prompt of more than ~880 tokens of a
151,936-token vocabulary) is mapped and given back as before.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 512 << 20  # every temporary of a 512-token prefill (its logits: 311 MB)
TRIM_THRESHOLD_BYTES = 512 << 20  # freed memory kept at the heap's top for the next pass


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (see the module); True if they were set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )

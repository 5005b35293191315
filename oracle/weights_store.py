"""Dequantized weights kept on disk, so a model is dequantized once per machine, not per load.

Dequantizing and transposing the 0.5B model's matrices takes 40-50 s of one core, the
forward pass it feeds a second or two; every process that loads the model (a test
module, an engine subprocess, a diagnosis) paid it again. A ``WeightsStore`` is a folder
of ``.npy`` files, one per kept matrix in the layout ``oracle.weights`` keeps it (``Wᵀ``,
[in, out], float32, C-contiguous), that later loads map read-only instead of computing:
the same numbers, bit for bit (``tests/oracle/test_weights_store.py``), shared between
processes through the page cache.

A file is named by what it holds, not by where it came from: the SHA-256 of the layout
version, the tensor's ggml type, its shape, its raw bytes and its first row as this
process dequantizes it. A changed file, another model, a newer layout or another
dequantization (a newer gguf-py; a test's planted dequantization bug, monkeypatched into
one process) is another name, never a stale or a poisoned answer; a file that does not
read back as the exact array expected (truncated, another shape, another dtype) is a
miss and is written again. Files are written to a temporary name and renamed, so a
reader never sees half of one; two processes storing the same matrix write the same
bytes. A store that cannot be written (read-only, full) only costs the time it would
have saved: ``failed_writes`` counts it. The folder is bounded (``max_bytes``): after a
write the least recently used files (a hit touches its file) are deleted until it fits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

#: Bumped whenever the stored layout or the dequantization that fills it changes.
LAYOUT = b"oracle.weights Wt [in, out] float32 C v1"
#: The smallest matrix (float32 bytes) worth a file: below it, dequantizing costs less than
#: opening one (the 0.5B's 896 x 128 key and value matrices are 0.46 MB).
MIN_BYTES = 1 << 18
#: The folder's bound: two 0.5B-sized models (1.9 GB each) and every tiny model, with room.
MAX_BYTES = 8 << 30


class WeightsStore:
    """A folder of dequantized, transposed matrices named by their content."""

    def __init__(self, folder: str | Path, min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> None:
        self.folder = Path(folder)
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.hits = 0
        self.writes = 0
        self.failed_writes = 0

    @staticmethod
    def key(ggml_type: int, shape: tuple[int, ...], raw: np.ndarray, first_row: np.ndarray) -> str:
        """The name of a matrix's stored ``Wᵀ``: what it is computed from (``raw``) and how
        (``first_row``: row 0 as this process dequantizes it, float32), hashed."""
        h = hashlib.sha256(LAYOUT)
        h.update(f"|{int(ggml_type)}|{'x'.join(map(str, shape))}|".encode())
        h.update(memoryview(np.ascontiguousarray(raw)))
        h.update(b"|row0|")
        h.update(memoryview(np.ascontiguousarray(first_row, dtype=np.float32)))
        return h.hexdigest()

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.npy"

    def load(self, key: str, shape: tuple[int, int]) -> np.ndarray | None:
        """The stored ``Wᵀ`` [in, out] (read-only, memory-mapped), or None if it is not there
        exactly as expected."""
        wt = self._mapped(key, shape)
        if wt is None:
            return None
        self.hits += 1
        with contextlib.suppress(OSError):
            os.utime(self.path(key))  # used now: the last to go when the folder is trimmed
        return wt

    def _mapped(self, key: str, shape: tuple[int, ...]) -> np.ndarray | None:
        try:
            wt = np.load(self.path(key), mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if wt.dtype != np.float32 or wt.shape != shape or not wt.flags.c_contiguous:
            return None
        return wt

    def save(self, key: str, wt: np.ndarray) -> np.ndarray:
        """Keep ``wt`` under ``key`` (atomically: written aside, then renamed) and return it
        mapped back from the file (read-only), so the caller can drop the computed copy: the
        first load of a model then holds its weights as reclaimable file pages like every
        later one, not as anonymous memory. ``wt`` itself if it could not be kept."""
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    np.save(f, wt, allow_pickle=False)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            self.failed_writes += 1
            return wt
        self.writes += 1
        self.trim(keep=target)
        mapped = self._mapped(key, wt.shape)
        return wt if mapped is None else mapped

    def trim(self, keep: Path) -> None:
        """Delete the least recently used files (not ``keep``) until the folder fits ``max_bytes``."""
        files = []
        for path in self.folder.glob("*/*.npy"):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)  # a process mapping it keeps its pages until it lets go
                total -= size

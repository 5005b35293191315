"""GGUF reading: typed metadata, the tensor table, lazy memory-mapped tensor data.

The file format (little-endian, versions 2 and 3):

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv ×      key: string | u32 value_type | value
    n_tensors × name: string | u32 n_dims | n_dims × u64 ne | u32 ggml_type | u64 offset
    padding to ``general.alignment`` (default 32) | tensor data

A string is ``u64 length | bytes``; an array is ``u32 elem_type | u64 count | elems``.
``ne`` lists dimensions fastest-first, so numpy shape is ``reversed(ne)``.

Every read is bounds-checked, so a malformed file is a ``GGUFError`` naming what is
wrong and where — never a traceback, an endless loop or a huge allocation. Arrays
of numbers become numpy arrays in one ``frombuffer``; only string arrays are
walked element by element (and decoded once per process for the same bytes), which
keeps loading a 150k-token vocabulary well under a second. Tensor bytes are never read until asked for.
"""

from __future__ import annotations

import collections
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

D = TypeVar("D")  # what ``GGUFFile.derived`` computes

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4

# value_type -> (name, numpy dtype); 8 = string and 9 = array are handled apart.
SCALAR_TYPES: dict[int, tuple[str, np.dtype]] = {
    0: ("uint8", np.dtype("<u1")),
    1: ("int8", np.dtype("<i1")),
    2: ("uint16", np.dtype("<u2")),
    3: ("int16", np.dtype("<i2")),
    4: ("uint32", np.dtype("<u4")),
    5: ("int32", np.dtype("<i4")),
    6: ("float32", np.dtype("<f4")),
    7: ("bool", np.dtype("<u1")),
    10: ("uint64", np.dtype("<u8")),
    11: ("int64", np.dtype("<i8")),
    12: ("float64", np.dtype("<f8")),
}
STRING, ARRAY = 8, 9
_U64 = struct.Struct("<Q")


class GGUFError(ValueError):
    """The file is not a GGUF this reader can trust; the message says why."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (slowest dimension first)
    ggml_type: int
    offset: int  # absolute offset of the first byte in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.ggml_type).name


class _Cursor:
    """A bounds-checked reader over the file's bytes."""

    def __init__(self, buf: memoryview, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise GGUFError(
                f"{self.path}: truncated file: {what} needs {n} bytes at offset {self.pos}, "
                f"file has {len(self.buf)}"
            )
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def u32(self, what: str) -> int:
        return int.from_bytes(self.take(4, what), "little")

    def u64(self, what: str) -> int:
        return int.from_bytes(self.take(8, what), "little")

    def count(self, what: str, min_elem_size: int) -> int:
        """An element count, refused when the rest of the file cannot hold it."""
        n = self.u64(what)
        if n * min_elem_size > len(self.buf) - self.pos:
            raise GGUFError(
                f"{self.path}: absurd length {n} for {what} at offset {self.pos - 8}: "
                f"only {len(self.buf) - self.pos} bytes remain (corrupt or truncated file)"
            )
        return n

    def string(self, what: str) -> str:
        raw = self.take(self.count(what, 1), what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(
                f"{self.path}: {what} is not valid UTF-8 at offset {self.pos - len(raw)}: {exc}"
            ) from None

    def strings(self, n: int, what: str) -> list[str]:
        """``n`` strings: their lengths walked and bounds-checked here (``_walk``), the block
        then decoded (``_decoded_strings``). The tiny models and the real ones share a
        vocabulary, and a session opens each file again per stage: a block whose bytes equal
        one read before (``_known_strings``) is neither walked nor decoded again — the walk
        reads nothing else, so it would end where that one did, with the same strings."""
        start = self.pos
        known = _known_strings(self.buf, start, n)
        if known is None:
            block = self._walk(n, what)
            try:
                known = block, _decoded_strings(block, n)
            except _BadString as exc:
                index, offset, reason = exc.args
                raise GGUFError(
                    f"{self.path}: {what}[{index}] is not valid UTF-8 at offset {start + offset}: {reason}"
                ) from None
            _KNOWN.append((n, *known))
        block, strings = known
        self.pos = start + len(block)
        return list(strings)  # the strings shared, the list each file's own

    def _walk(self, n: int, what: str) -> bytes:
        """The block of ``n`` length-prefixed strings at the cursor, every length checked
        against the end of the file."""
        buf, start, end, unpack = self.buf, self.pos, len(self.buf), _U64.unpack_from
        pos, i = start, 0
        try:
            for i in range(n):  # i names the string a truncation cuts
                (length,) = unpack(buf, pos)
                pos += 8
                if pos + length > end:
                    raise GGUFError(
                        f"{self.path}: truncated file: {what}[{i}] of {length} bytes at offset {pos}"
                    )
                pos += length
        except struct.error:
            raise GGUFError(f"{self.path}: truncated file: {what}[{i}] length at offset {pos}") from None
        return bytes(buf[start:pos])

    def value(self, vtype: int, what: str) -> Any:
        if vtype in SCALAR_TYPES:
            dtype = SCALAR_TYPES[vtype][1]
            v = np.frombuffer(self.take(dtype.itemsize, what), dtype)[0].item()
            return bool(v) if vtype == 7 else v
        if vtype == STRING:
            return self.string(what)
        if vtype == ARRAY:
            etype = self.u32(f"{what} element type")
            if etype == STRING:
                return self.strings(self.count(f"{what} length", 8), what)
            if etype not in SCALAR_TYPES:
                raise GGUFError(f"{self.path}: unknown array element type {etype} in {what}")
            dtype = SCALAR_TYPES[etype][1]
            n = self.count(f"{what} length", dtype.itemsize)
            arr = np.frombuffer(self.take(n * dtype.itemsize, what), dtype)
            return arr.astype(bool) if etype == 7 else arr
        raise GGUFError(f"{self.path}: unknown value type {vtype} for {what} at offset {self.pos - 4}")


#: The last string blocks read — (count, bytes, strings), a vocabulary or its merges, ~2-3 MB
#: each, newest last: walking and decoding 150k strings is ~0.4 s, comparing the bytes ~1 ms.
_KNOWN: collections.deque[tuple[int, bytes, tuple[str, ...]]] = collections.deque(maxlen=4)


def _known_strings(buf: Any, start: int, n: int) -> tuple[bytes, tuple[str, ...]] | None:
    """The block of ``n`` strings read before whose bytes are the ones at ``start``, and its
    strings (moved to the newest), or None."""
    for entry in _KNOWN:
        count, block, strings = entry
        if count == n and buf[start : start + len(block)] == block:
            _KNOWN.remove(entry)
            _KNOWN.append(entry)
            return block, strings
    return None


class _BadString(Exception):
    """A string of a block is not UTF-8: (its index, the offset of its bytes in the block, why)."""


def _decoded_strings(block: bytes, n: int) -> tuple[str, ...]:
    """The ``n`` length-prefixed UTF-8 strings of a block whose lengths were checked
    (``_Cursor._walk``)."""
    out: list[str] = []
    append, unpack, pos = out.append, _U64.unpack_from, 0
    for index in range(n):
        (length,) = unpack(block, pos)
        pos += 8
        try:
            append(block[pos : pos + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _BadString(index, pos, str(exc)) from None
        pos += length
    return tuple(out)


def _type_name(vtype: int, value: Any) -> str:
    if vtype == STRING:
        return "string"
    if vtype == ARRAY:
        inner = "string" if isinstance(value, list) else str(value.dtype) if value.dtype != bool else "bool"
        return f"array[{inner}]"
    return SCALAR_TYPES[vtype][0]


class GGUFFile:
    """A parsed GGUF: ``metadata`` (key -> Python value or numpy array), ``types``
    (key -> GGUF value type name), ``tensors`` (name -> TensorInfo). Tensor data
    stays on disk (memory-mapped) until ``tensor_bytes`` / ``dequantize``."""

    def __init__(self, path: str | Path, header_only: bool = False) -> None:
        """``header_only`` reads the metadata and tensor table without requiring the
        tensor data to be present (a file cut after its header, e.g. a vocab source)."""
        self.path = Path(path)
        self.header_only = header_only
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size == 0:
                    raise GGUFError(f"{self.path}: empty file, not a GGUF")
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise GGUFError(f"{self.path}: cannot open: {exc.strerror or exc}") from None
        self.size = size
        self._derived: dict[str, Any] = {}
        self._parse(_Cursor(memoryview(self._map), self.path))

    def _parse(self, cur: _Cursor) -> None:
        magic = bytes(cur.take(4, "magic"))
        if magic != MAGIC:
            raise GGUFError(f"{self.path}: bad magic {magic!r}, expected {MAGIC!r}: not a GGUF file")
        self.version = cur.u32("version")
        if self.version not in SUPPORTED_VERSIONS:
            raise GGUFError(
                f"{self.path}: unsupported GGUF version {self.version} (supported: {SUPPORTED_VERSIONS})"
            )
        n_tensors = cur.count("tensor count", 4 + 8 + 4 + 8)
        n_kv = cur.count("metadata count", 8 + 4)

        self.metadata: dict[str, Any] = {}
        self.types: dict[str, str] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            vtype = cur.u32(f"value type of {key!r}")
            if key in self.metadata:
                raise GGUFError(f"{self.path}: duplicate metadata key {key!r}")
            value = cur.value(vtype, repr(key))
            self.metadata[key], self.types[key] = value, _type_name(vtype, value)

        self.alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            type(self.alignment) is not int  # a bool is an int to isinstance
            or self.alignment <= 0
            or self.alignment & (self.alignment - 1)
        ):
            raise GGUFError(f"{self.path}: general.alignment {self.alignment!r} is not a power of two")

        infos = []
        for i in range(n_tensors):
            name = cur.string(f"tensor name #{i}")
            n_dims = cur.u32(f"dimension count of tensor {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)"
                )
            ne = [cur.u64(f"dimension of tensor {name!r}") for _ in range(n_dims)]
            ggml_type = cur.u32(f"type of tensor {name!r}")
            rel = cur.u64(f"offset of tensor {name!r}")
            infos.append((name, ne, ggml_type, rel))

        data_start = -(-cur.pos // self.alignment) * self.alignment
        self.data_offset = data_start
        self.tensors: dict[str, TensorInfo] = {}
        for name, ne, ggml_type, rel in infos:
            if ggml_type not in GGML_QUANT_SIZES:
                raise GGUFError(f"{self.path}: tensor {name!r} has unknown ggml type {ggml_type}")
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            if any(d <= 0 for d in ne) or ne[0] % block:
                raise GGUFError(f"{self.path}: tensor {name!r} shape {ne} does not fit blocks of {block}")
            n_elems = int(np.prod(ne, dtype=object))
            nbytes = n_elems // block * type_size
            if rel % self.alignment:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} data offset {rel} is not aligned to {self.alignment}"
                )
            if not self.header_only and data_start + rel + nbytes > self.size:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} data [{data_start + rel}, {data_start + rel + nbytes}) "
                    f"lies beyond the end of the file ({self.size} bytes)"
                )
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor name {name!r}")
            self.tensors[name] = TensorInfo(name, tuple(reversed(ne)), ggml_type, data_start + rel, nbytes)

    # -- tensor data -------------------------------------------------------------

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of a tensor as a read-only uint8 view onto the mapped file."""
        info = self.tensors[name]
        if info.offset + info.nbytes > self.size:
            raise GGUFError(f"{self.path}: tensor {name!r} data is not in this file (header-only read)")
        return np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)

    def release_pages(self, name: str) -> None:
        """Let go of the mapped file's pages of a tensor this process has read (its whole
        pages; ``madvise(MADV_DONTNEED)``): once a tensor is kept dequantized, its raw
        bytes need not count in our resident size (~0.5 GB on the 0.5B model, issue 38).
        The file is read-only and shared: a later read maps the pages again from the
        page cache. A no-op where the platform has no ``madvise``."""
        info = self.tensors[name]
        page = mmap.PAGESIZE
        start = -(-info.offset // page) * page
        stop = min(info.offset + info.nbytes, self.size) // page * page
        if stop > start and hasattr(self._map, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, start, stop - start)

    def dequantize(self, name: str) -> np.ndarray:
        """A tensor as float32 in numpy shape, dequantized through gguf-py's quants."""
        info = self.tensors[name]
        qtype = GGMLQuantizationType(info.ggml_type)
        raw = self.tensor_bytes(name)
        if qtype == GGMLQuantizationType.F32:
            return raw.view(np.float32).reshape(info.shape)
        return dequantize_blocks(raw, qtype).reshape(info.shape)

    def dequantize_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a 2-D tensor as float32 [stop - start, columns]."""
        info = self.tensors[name]
        qtype = GGMLQuantizationType(info.ggml_type)
        raw = self.tensor_bytes(name).reshape(info.shape[0], -1)[start:stop]
        if qtype == GGMLQuantizationType.F32:
            return raw.view(np.float32)
        return dequantize_blocks(raw.reshape(-1), qtype).reshape(raw.shape[0], info.shape[1])

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def derived(self, name: str, compute: Callable[[GGUFFile], D]) -> D:
        """``compute(self)``, computed once per parsed file under ``name``: for what the
        layers above read from its header (``oracle.dispatch``'s spec), which cannot change
        once parsed. A ``compute`` that raises is not remembered: the next call raises again."""
        if name not in self._derived:
            self._derived[name] = compute(self)
        return self._derived[name]

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"


#: Elements per row handed to gguf-py's dequantization (see ``dequantize_blocks``): its
#: groups of 16 rows are then ~64k elements, whose temporaries stay cache-sized (much longer
#: rows made the 0.5B's 136M-element embedding slower, not faster).
DEQUANTIZE_ROW_ELEMENTS = 4000


def dequantize_blocks(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """The float32 values of ``raw``, a run of whole blocks of type ``qtype`` (bytes),
    flat. gguf-py dequantizes the rows of what it is given in groups of 16 rows, one
    Python call per group: the rows of a tiny model's 151,936 x 64 output matrix made
    9,500 calls per dequantization (0.1-0.5 s each matrix). A block is dequantized on its
    own, whatever row it is in, so the blocks are handed over as rows of
    ``DEQUANTIZE_ROW_ELEMENTS`` elements (and one row for the rest): the same numbers,
    a few dozen calls."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = raw.reshape(-1, type_size)
    per_row = max(1, DEQUANTIZE_ROW_ELEMENTS // block_size)
    whole = blocks.shape[0] - blocks.shape[0] % per_row
    out = np.empty(blocks.shape[0] * block_size, dtype=np.float32)
    if whole:
        out[: whole * block_size] = quants.dequantize(
            blocks[:whole].reshape(-1, per_row * type_size), qtype
        ).reshape(-1)
    if whole < blocks.shape[0]:
        out[whole * block_size :] = quants.dequantize(blocks[whole:].reshape(1, -1), qtype).reshape(-1)
    return out


def open_gguf(path: str | Path, header_only: bool = False) -> GGUFFile:
    return GGUFFile(path, header_only=header_only)

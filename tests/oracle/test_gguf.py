"""The oracle's GGUF reader vs gguf-py's GGUFReader, its speed vs llama.cpp, and its
behaviour on malformed files (hand-made cases and hypothesis-generated corruptions)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle.gguf import DEQUANTIZE_ROW_ELEMENTS, GGUFError, open_gguf
from specgate.supply.models import load_manifest
from specgate.supply.tiny_specs import TYPES as TINY_TYPES
from tests.ggufs import real_header_sample, write_gguf

MANIFEST = load_manifest()


class GGUFPyReaders:
    """gguf-py's reader of the file last asked for (parsing a 150k-token vocabulary takes
    seconds; holding one takes ~0.7 GB of small numpy arrays, so only one is kept)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.reader = None

    def reader_of(self, path: Path):
        import gguf

        if self.path != str(path):
            self.path, self.reader = None, None  # drop the last one before parsing the next
            self.reader, self.path = gguf.GGUFReader(str(path)), str(path)
        return self.reader

    def view(self, path: Path) -> tuple[dict, dict]:
        reader = self.reader_of(path)
        meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        tensors = {
            t.name: (
                tuple(int(d) for d in reversed(t.shape)),
                int(t.tensor_type),
                int(t.data_offset),
                int(t.n_bytes),
            )
            for t in reader.tensors
        }
        return meta, tensors


@pytest.fixture(scope="module")
def gguf_py():
    readers = GGUFPyReaders()
    yield readers
    readers.path, readers.reader = None, None


def plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


@pytest.mark.slow  # gguf-py parses each 150k-token vocabulary in 7-16 s
@pytest.mark.parametrize("model_id", [m for m in MANIFEST])
def test_metadata_and_tensor_table_equal_gguf_py(model_id, model, gguf_py):
    ours = open_gguf(model.gguf)
    meta, tensors = gguf_py.view(model.gguf)
    assert set(ours.metadata) == set(meta), f"{model_id}: key sets differ: {set(ours.metadata) ^ set(meta)}"
    for key, value in meta.items():
        mine = plain(ours.metadata[key])
        if isinstance(value, float):
            assert mine == pytest.approx(value, rel=0, abs=0), (
                f"{model_id}: {key}: {mine!r} != gguf-py {value!r}"
            )
        else:
            assert mine == value, f"{model_id}: {key}: oracle {str(mine)[:200]} != gguf-py {str(value)[:200]}"
    mine_tensors = {t.name: (t.shape, t.ggml_type, t.offset, t.nbytes) for t in ours.tensors.values()}
    assert mine_tensors == tensors, f"{model_id}: tensor tables differ"


@pytest.mark.slow  # gguf-py parses the 0.5B's 150k-token vocabulary first
def test_dequantize_matches_gguf_py_on_every_tensor_type(gguf_py, model_id="qwen2.5-coder-0.5b-instruct"):
    """One tensor of each ggml type in the real model, dequantized by both readers."""
    import gguf

    from specgate.supply.models import model_ref

    path = model_ref(model_id).gguf
    ours = open_gguf(path)
    reader = gguf_py.reader_of(path)
    seen = {}
    for t in sorted(reader.tensors, key=lambda t: int(t.n_bytes)):  # the smallest of each type
        seen.setdefault(int(t.tensor_type), t)
    assert len(seen) >= 4, f"expected several tensor types in {model_id}, got {sorted(seen)}"
    for ggml_type, t in seen.items():
        ref = gguf.dequantize(t.data, t.tensor_type).reshape(tuple(int(d) for d in reversed(t.shape)))
        np.testing.assert_array_equal(ours.dequantize(t.name), ref, err_msg=f"{t.name} (type {ggml_type})")


@pytest.mark.parametrize("kind", TINY_TYPES)
def test_dequantize_in_long_rows_equals_gguf_py_row_by_row(kind):
    """``oracle.gguf.dequantize`` hands gguf-py the blocks as long rows (``dequantize_blocks``):
    bit for bit what gguf-py gives for the tensor's own rows — checked at its first rows, the
    rows around the end of the last whole long row, and its last rows."""
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    from specgate.plugin import model_missing
    from specgate.supply import models

    model_id = f"tiny-qwen3-{kind}"
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    g = open_gguf(models.model_ref(model_id).gguf)
    info = g.tensors["output.weight"]  # 151,936 x 64: many long rows and a rest
    ours = g.dequantize("output.weight")
    n_rows, qtype = info.shape[0], GGMLQuantizationType(info.ggml_type)
    raw = g.tensor_bytes("output.weight").reshape(n_rows, -1)
    if qtype != GGMLQuantizationType.F32:
        block_size = GGML_QUANT_SIZES[qtype][0]
        per_row = max(1, DEQUANTIZE_ROW_ELEMENTS // block_size)
        whole_rows = (
            (info.nbytes // GGML_QUANT_SIZES[qtype][1]) // per_row * per_row * block_size // info.shape[1]
        )
        assert 0 < whole_rows < n_rows  # both paths are taken
    else:
        whole_rows = n_rows // 2
    for rows in (slice(0, 40), slice(whole_rows - 20, whole_rows + 20), slice(n_rows - 40, n_rows)):
        want = (
            raw[rows].view(np.float32)
            if qtype == GGMLQuantizationType.F32
            else quants.dequantize(raw[rows], qtype)
        )
        np.testing.assert_array_equal(ours[rows], want, err_msg=f"{model_id} rows {rows}")


def test_metadata_load_time_within_2x_of_llama_cpp(record_property):
    """Reading metadata + tensor table vs llama.cpp's vocab-only load of the same file,
    best of 3 each, interleaved in one run. Target: within 2× of llama.cpp."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from specgate.supply.models import model_ref

    path = str(model_ref("qwen2.5-coder-0.5b-instruct").gguf)
    ours, theirs = [], []
    for _ in range(3):  # CPU time (every thread's): the work each does, not the neighbours' load
        t0 = time.process_time()
        open_gguf(path)
        ours.append(time.process_time() - t0)
        t0 = time.process_time()
        llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False).close()
        theirs.append(time.process_time() - t0)
    ratio = min(ours) / min(theirs)
    record_property("gguf_load_s", min(ours))
    record_property("llama_vocab_load_s", min(theirs))
    record_property("ratio", ratio)
    print(
        f"\nmetadata load: oracle {min(ours):.3f}s, llama.cpp vocab-only {min(theirs):.3f}s, ratio {ratio:.2f}"
    )
    assert ratio <= 2.0, (
        f"oracle metadata load {min(ours):.3f}s is {ratio:.2f}x llama.cpp's {min(theirs):.3f}s"
    )


# ---------------------------------------------------------------------------
# malformed input: a clear GGUFError naming the problem


def _valid(tmp_path: Path) -> bytes:
    return write_gguf(tmp_path / "ok.gguf").read_bytes()


def _u64_after(data: bytes, needle: bytes) -> int:
    """Offset of the u64 that follows ``needle`` in the header."""
    return data.index(needle) + len(needle)


MALFORMED = {
    "bad magic": (lambda d: b"GGUX" + d[4:], "bad magic"),
    "version 1": (lambda d: d[:4] + struct.pack("<I", 1) + d[8:], "unsupported GGUF version 1"),
    "version 99": (lambda d: d[:4] + struct.pack("<I", 99) + d[8:], "unsupported GGUF version 99"),
    "empty": (lambda d: b"", "empty file"),
    "truncated header": (lambda d: d[:200], "truncated"),
    "truncated in magic": (lambda d: d[:2], "truncated"),
    "absurd kv count": (lambda d: d[:16] + struct.pack("<Q", 2**62) + d[24:], "absurd length"),
    "absurd tensor count": (lambda d: d[:8] + struct.pack("<Q", 2**40) + d[16:], "absurd length"),
    "tensor data cut off": (lambda d: d[: len(d) - 64], "beyond the end of the file"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_is_a_clear_error(tmp_path, case):
    corrupt, expected = MALFORMED[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(corrupt(_valid(tmp_path)))
    with pytest.raises(GGUFError, match=expected):
        open_gguf(path)


def test_unknown_value_type_is_named(tmp_path):
    data = bytearray(_valid(tmp_path))
    key = b"general.architecture"
    at = data.index(key) + len(key)  # the u32 value type follows the key
    data[at : at + 4] = struct.pack("<I", 77)
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="unknown value type 77"):
        open_gguf(tmp_path / "bad.gguf")


def test_absurd_array_length_is_refused_without_allocating(tmp_path):
    data = bytearray(_valid(tmp_path))
    key = b"tokenizer.ggml.tokens"
    at = data.index(key) + len(key) + 4 + 4  # value type, element type, then the u64 count
    data[at : at + 8] = struct.pack("<Q", 2**61)
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="absurd length"):
        open_gguf(tmp_path / "bad.gguf")


def test_misaligned_tensor_offset(tmp_path):
    path = write_gguf(
        tmp_path / "t.gguf",
        tensors={"a.weight": np.ones((4, 32), np.float32), "b.weight": np.ones((4, 32), np.float32)},
    )
    data = bytearray(path.read_bytes())
    name = b"b.weight"
    at = data.index(name) + len(name) + 4 + 2 * 8 + 4  # n_dims, 2 dims, type -> offset
    (offset,) = struct.unpack_from("<Q", data, at)
    struct.pack_into("<Q", data, at, offset + 4)
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="not aligned"):
        open_gguf(path)


def test_missing_path_and_directory_are_clear(tmp_path):
    with pytest.raises(GGUFError, match="cannot open"):
        open_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="cannot open"):
        open_gguf(tmp_path)


# ---------------------------------------------------------------------------
# corruption properties on a real model's header


@pytest.fixture(scope="module")
def real_header(tmp_path_factory) -> bytes:
    from specgate.supply.models import model_ref

    src = model_ref("qwen2.5-coder-0.5b-instruct").gguf
    return real_header_sample(src, tmp_path_factory.mktemp("hdr") / "header.gguf").read_bytes()


def corruptions(size: int) -> st.SearchStrategy:
    pos = st.integers(0, size - 1)
    return st.one_of(
        st.tuples(st.just("flip"), st.lists(st.tuples(pos, st.integers(0, 255)), min_size=1, max_size=8)),
        st.tuples(st.just("truncate"), st.integers(0, size - 1)),
        st.tuples(
            st.just("u64"), st.tuples(pos, st.sampled_from([0, 1, 2**31, 2**32 + 7, 2**63 - 1, 2**64 - 1]))
        ),
        st.tuples(st.just("insert"), st.tuples(pos, st.binary(min_size=1, max_size=16))),
    )


def corrupt(data: bytes, how: tuple) -> bytes:
    kind, arg = how
    buf = bytearray(data)
    if kind == "flip":
        for p, b in arg:
            buf[p] = b
    elif kind == "truncate":
        del buf[arg:]
    elif kind == "u64":
        p, v = arg
        buf[p : p + 8] = v.to_bytes(8, "little")
    else:
        p, extra = arg
        buf[p:p] = extra
    return bytes(buf)


@settings(
    max_examples=max(500, settings().max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_corrupted_real_header_never_escapes_as_another_exception(real_header, tmp_path, data):
    how = data.draw(corruptions(len(real_header)))
    path = tmp_path / "c.gguf"
    path.write_bytes(corrupt(real_header, how))
    t0 = time.process_time()  # CPU time: the work done, whatever else the machine runs
    try:
        g = open_gguf(path)
        for name in g.tensors:  # reading tensor bytes of an accepted file stays in bounds
            assert g.tensor_bytes(name).size == g.tensors[name].nbytes
    except GGUFError as exc:
        assert str(path) in str(exc), f"error does not name the file: {exc}"
    elapsed = time.process_time() - t0
    assert elapsed < 1.0, f"{how}: took {elapsed:.2f}s of CPU"


def _token_at(data: bytes, token: bytes) -> int:
    """Offset of ``token``'s bytes in the vocabulary block (after its u64 length)."""
    return data.index(struct.pack("<Q", len(token)) + token) + 8


def test_invalid_utf8_token_is_named_with_its_index_and_file_offset(tmp_path):
    tokens = ["a", "b", "zq", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    data = bytearray(write_gguf(tmp_path / "ok.gguf", tokens=tokens).read_bytes())
    at = _token_at(data, b"zq")
    data[at] = 0xFF  # never a UTF-8 byte
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(
        GGUFError, match=rf"'tokenizer\.ggml\.tokens'\[2\] is not valid UTF-8 at offset {at}:"
    ):
        open_gguf(tmp_path / "bad.gguf")


def test_a_string_running_past_the_end_is_named(tmp_path):
    data = bytearray(_valid(tmp_path))
    at = _token_at(data, b"ab") - 8
    data[at : at + 8] = struct.pack("<Q", len(data))  # the length of "ab" now reaches past the file
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=r"truncated file: 'tokenizer\.ggml\.tokens'\[2\] of \d+ bytes"):
        open_gguf(tmp_path / "bad.gguf")


def test_string_arrays_are_read_by_content_and_each_file_owns_its_list(tmp_path):
    """Decoded string blocks are kept by their bytes: two files whose vocabularies differ
    in one token each read their own, and a list changed by one reader is not another's."""
    base = ["a", "b", "ab", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    one = open_gguf(write_gguf(tmp_path / "one.gguf", tokens=base))
    twin = open_gguf(write_gguf(tmp_path / "twin.gguf", tokens=base))
    other = open_gguf(write_gguf(tmp_path / "other.gguf", tokens=[*base[:2], "ba", *base[3:]]))
    assert one.metadata["tokenizer.ggml.tokens"] == base == twin.metadata["tokenizer.ggml.tokens"]
    assert other.metadata["tokenizer.ggml.tokens"][2] == "ba"
    one.metadata["tokenizer.ggml.tokens"].append("mutated")
    assert twin.metadata["tokenizer.ggml.tokens"] == base
    assert open_gguf(tmp_path / "one.gguf").metadata["tokenizer.ggml.tokens"] == base


def test_a_string_block_walked_before_is_recognized_by_its_bytes(tmp_path, monkeypatch):
    """The lengths of a block whose bytes equal one walked before are not walked again (the
    walk would read the same bytes); a block differing in one length byte is walked, and the
    length running past the file is named."""
    from oracle import gguf as oracle_gguf

    walks: list[int] = []
    walk = oracle_gguf._Cursor._walk

    def counted(self, n, what):
        walks.append(n)
        return walk(self, n, what)

    monkeypatch.setattr(oracle_gguf._Cursor, "_walk", counted)
    tokens = ["a", "b", "zq", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "unwalked"]
    data = write_gguf(tmp_path / "one.gguf", tokens=tokens).read_bytes()
    assert open_gguf(tmp_path / "one.gguf").metadata["tokenizer.ggml.tokens"] == tokens
    first = list(walks)
    assert len(tokens) in first
    (tmp_path / "twin.gguf").write_bytes(data)
    assert open_gguf(tmp_path / "twin.gguf").metadata["tokenizer.ggml.tokens"] == tokens
    assert walks == first  # nothing walked again
    bad = bytearray(data)
    at = _token_at(bad, b"zq") - 8
    bad[at : at + 8] = struct.pack("<Q", len(bad))
    (tmp_path / "bad.gguf").write_bytes(bytes(bad))
    with pytest.raises(GGUFError, match=r"truncated file: 'tokenizer\.ggml\.tokens'\[2\] of \d+ bytes"):
        open_gguf(tmp_path / "bad.gguf")
    assert walks[len(first) :] == [len(tokens)]

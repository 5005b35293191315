"""The oracle tokenizer's own rules, on small hand-built vocabularies whose expected
ids follow from the rule by hand, plus the engine documentation's known answer.

Hand-built vocabularies put the 256 byte tokens first, in byte order, so byte ``b``
has id ``b`` (``"a"`` = 97); extra tokens follow from id 256.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter
from hypothesis import given
from hypothesis import strategies as st

from oracle.byte_level import BYTE_TO_CHAR, from_standin, to_standin
from oracle.pretokenize import QWEN2, QWEN35, split
from oracle.tokenizer import Tokenizer, TokenizerError, Utf8Stream
from specgate.supply.derive import byte_alphabet
from specgate.supply.models import model_ref

R1 = "deepseek-r1-distill-qwen-7b-vocab"
R1_PROMPT = "<｜User｜>What is 2+2?<｜Assistant｜><think>\n"
R1_IDS = [151644, 3838, 374, 220, 17, 10, 17, 30, 151645, 151648, 198]  # the engine documentation, §2.3
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


def byte_tokens() -> list[str]:
    """The 256 byte stand-ins in byte order, from the GGUF deriver's own table."""
    table = byte_alphabet()
    return [table[b] for b in range(256)]


def write_vocab(
    path: Path,
    extra: list[tuple[str, int]] = (),
    merges: list[str] | None = ("a b",),
    pre: str | None = "qwen2",
    model: str | None = "gpt2",
    drop_byte: int | None = None,
) -> Path:
    """A vocab-only GGUF: byte tokens (ids 0-255), then ``extra`` (text, token type)."""
    tokens = byte_tokens() + [text for text, _ in extra]
    types = [NORMAL] * 256 + [kind for _, kind in extra]
    if drop_byte is not None:
        tokens[drop_byte] = f"[no byte {drop_byte}]"
    w = GGUFWriter(str(path), "qwen2")
    if model is not None:
        w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(list(merges))
    w.add_eos_token_id(len(tokens) - 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tokenizer(tmp_path: Path, **kwargs) -> Tokenizer:
    return Tokenizer.from_gguf(write_vocab(tmp_path / "vocab.gguf", **kwargs))


# --- known answer ---------------------------------------------------------------


def cached(model_id: str):
    try:
        return model_ref(model_id)
    except Exception as exc:
        pytest.skip(f"{model_id} not in the cache: {exc}")


def test_known_answer_r1_prompt():
    tok = Tokenizer.from_gguf(cached(R1).gguf)
    assert tok.encode(R1_PROMPT, parse_special=True) == R1_IDS


@pytest.mark.live
def test_known_answer_r1_prompt_llamacpp(reference):
    assert reference("llamacpp").encode(cached(R1), R1_PROMPT, True) == R1_IDS


# --- load refusals ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"pre": "llama3"},
            r"tokenizer.ggml.pre is 'llama3'; supported pre-tokenizer rules: deepseek-r1-qwen, qwen2, qwen35",
        ),
        ({"pre": None}, r"tokenizer.ggml.pre is None; supported"),
        ({"model": "llama"}, r"tokenizer.ggml.model is 'llama'; supported: 'gpt2'"),
        ({"model": None}, r"tokenizer.ggml.model is None"),
        ({"merges": []}, r"tokenizer.ggml.merges is missing or empty"),
        ({"merges": None}, r"tokenizer.ggml.merges is missing or empty"),
        ({"drop_byte": 0x41}, r"lacks 1 of the 256 byte tokens \(first: byte 0x41 = 'A'\)"),
    ],
    ids=[
        "unknown-pre",
        "missing-pre",
        "not-gpt2",
        "no-model",
        "empty-merges",
        "missing-merges",
        "missing-byte",
    ],
)
def test_load_refuses(tmp_path, kwargs, message):
    with pytest.raises(TokenizerError, match=message):
        tokenizer(tmp_path, **kwargs)


# --- special tokens ---------------------------------------------------------------

SPECIALS = [
    ("ab", NORMAL),  # 256
    ("<think>", CONTROL),  # 257
    ("<think▁begin｜>", CONTROL),  # 258
    ("<tool_call>", USER_DEFINED),  # 259
    ("<|im_start|>", NORMAL),  # 260: a ChatML marker a converter left normal
]


def test_longest_special_wins_at_one_position(tmp_path):
    tok = tokenizer(tmp_path, extra=SPECIALS)
    assert tok.encode("x<think▁begin｜>y", parse_special=True) == [120, 258, 121]
    assert tok.encode("x<think>y", parse_special=True) == [120, 257, 121]


def test_earliest_special_wins(tmp_path):
    tok = tokenizer(tmp_path, extra=SPECIALS)
    # "<think>" starts before "<tool_call>"; the scan must not jump to a later marker first.
    assert tok.encode("<think>c<tool_call>", parse_special=True) == [257, 99, 259]
    assert tok.encode("c<tool_call><think>", parse_special=True) == [99, 259, 257]


def test_parse_special_off_keeps_control_tokens_as_text(tmp_path):
    tok = tokenizer(tmp_path, extra=SPECIALS)
    # "<think>" is text then: pieces "<think" and ">", all single bytes (no merge applies).
    assert tok.encode("<think>", parse_special=False) == [60, 116, 104, 105, 110, 107, 62]
    # user-defined tokens are matched either way (llama.cpp's semantics)
    assert tok.encode("<tool_call>", parse_special=False) == [259]


def test_chatml_marker_typed_normal_is_still_special(tmp_path):
    tok = tokenizer(tmp_path, extra=SPECIALS)
    assert tok.encode("<|im_start|>ab", parse_special=True) == [260, 256]


def test_real_metadata_wins_over_the_fallback(tmp_path):
    tok = tokenizer(tmp_path, extra=[("<|im_start|>", USER_DEFINED)])
    assert tok.encode("<|im_start|>", parse_special=False) == [256]


# --- BPE ----------------------------------------------------------------------------


def test_no_whole_piece_shortcut(tmp_path):
    # "abc" is a vocabulary entry, but no merge produces it: BPE gives "ab" + "c".
    tok = tokenizer(tmp_path, extra=[("ab", NORMAL), ("abc", NORMAL)], merges=["a b"])
    assert tok.encode("abc", parse_special=False) == [256, 99]


def test_lowest_rank_first(tmp_path):
    tok = tokenizer(tmp_path, extra=[("ab", NORMAL), ("bc", NORMAL)], merges=["b c", "a b"])
    assert tok.encode("abc", parse_special=False) == [97, 257]


def test_leftmost_pair_on_equal_rank(tmp_path):
    tok = tokenizer(tmp_path, extra=[("aa", NORMAL)], merges=["a a"])
    assert tok.encode("aaa", parse_special=False) == [256, 97]


def test_unknown_merge_result_falls_back_to_bytes(tmp_path):
    # "x y" is a merge but "xy" is not in the vocabulary: one token per byte, never id 0.
    tok = tokenizer(tmp_path, extra=[("ab", NORMAL)], merges=["a b", "x y"])
    assert tok.encode("xy", parse_special=False) == [120, 121]


# --- pre-tokenizer arms, by hand ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("a   b", ["a", "  ", " b"]),  # \s+(?!\S) leaves one space for the word
        ("a \n\n b", ["a", " \n\n", " b"]),  # \s*[\r\n]+ up to the last line break
        ("end  ", ["end", "  "]),  # trailing whitespace is one piece
        ("I'M it's", ["I", "'M", " it", "'s"]),
        ("2024", ["2", "0", "2", "4"]),
        ("(hi) ok!!\n\nx", ["(hi", ")", " ok", "!!\n\n", "x"]),
        ("\thi", ["\thi"]),
        ("\n hi", ["\n", " hi"]),
    ],
)
def test_qwen2_arms(text, pieces):
    assert split(text, QWEN2) == pieces


def test_qwen35_counts_marks_as_letters():
    assert split("e\u0301x", QWEN2) == ["e", "\u0301x"]  # the mark is punctuation-class: it prefixes the word
    assert split("e\u0301x", QWEN35) == ["e\u0301x"]
    assert split("a \u0301", QWEN2) == ["a", " \u0301"]
    assert split("a \u0301", QWEN35) == ["a", " \u0301"]


# --- decode and streaming -------------------------------------------------------------


def test_byte_table_matches_transformers():
    convert = pytest.importorskip("transformers.convert_slow_tokenizer")
    assert convert.bytes_to_unicode() == BYTE_TO_CHAR


def test_standin_round_trip():
    data = bytes(range(256))
    assert from_standin(to_standin(data)) == data


def test_decode_skips_out_of_range_and_passes_real_unicode(tmp_path):
    tok = tokenizer(tmp_path, extra=[("ab", NORMAL), ("<｜User｜>", CONTROL)])
    assert tok.decode_bytes([97, 10**9, -1, 98, 257]) == b"ab" + "<｜User｜>".encode()


def test_decode_bytes_of_every_byte_token(tmp_path):
    tok = tokenizer(tmp_path)
    assert tok.decode_bytes(range(256)) == bytes(range(256))


def test_stream_holds_back_a_split_character():
    stream = Utf8Stream()
    assert [stream.push(b) for b in (b"a\xe4", b"\xb8", b"\xadb")] == [b"a", b"", "中b".encode()]
    assert stream.finish() == b""


@given(st.text(max_size=24), st.lists(st.integers(min_value=0, max_value=96), max_size=8))
def test_stream_chunks_are_whole_characters_and_exact(text, cuts):
    data = text.encode("utf-8")
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    stream = Utf8Stream()
    chunks = [stream.push(data[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]  # noqa: RUF007
    chunks.append(stream.finish())
    assert b"".join(chunks) == data
    for chunk in chunks:
        chunk.decode("utf-8")  # never part of a character

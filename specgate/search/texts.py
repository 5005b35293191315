"""Texts for the split and encode stages, token-id lists for decode.

Texts are short concatenations of fragments weighted toward what breaks
tokenizers — script and category boundaries, combining marks, letter-numbers
(``Ⅸ``) after spaces, whitespace runs, digit runs, contractions, special tokens
and their look-alikes, unassigned and private-use code points — mixed with
arbitrary code points. Short pieces keep hypothesis' shrinking effective: a
failing text shrinks fragment by fragment, then character by character.

Lone surrogates are never generated: no engine can receive them over the JSON
protocol, and no UTF-8 tokenizer is asked to encode them.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Fragments a tokenizer's rules treat specially (see the module docstring).
FRAGMENTS: tuple[str, ...] = (
    # whitespace runs and kinds (the \s+(?!\S) arm, \r\n, no-break and ideographic spaces)
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x85",
    # contractions, in both cases
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s",
    # digits: runs the pre-tokenizer cuts into ones (qwen2) or threes
    "1", "12", "123", "2024", "3.14", "٣", "０",
    # letter-numbers and other \p{N} that are not digits
    "Ⅸ", "ⅻ", "①", "²", "½", "〇",
    # letters of several scripts, combining marks
    "a", "Z", "ab", "The", "ing", "é", "e\u0301", "\u0301", "\u0308", "ñ", "ß", "ǅ",
    "中文", "日本語", "한국어", "Привет", "مرحبا", "עברית", "ไทย", "हिन्दी",
    # punctuation and symbols
    ".", ",", "!", "?!", "...", "-", "--", "_", "$", "\\", "/", "(", ")", "{", "}", "<", ">", "&", "@", "#",
    # astral plane, emoji sequences
    "🙂", "👍🏽", "👨‍👩‍👧", "𝔘𝔫𝔦", "𐍈", "🇯🇵",
    # special tokens and look-alikes
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<|im_start", "im_end|>", "<|", "|>", "<|fim_prefix|>", "<|IM_END|>", "< |im_end| >",
    # private use, unassigned, noncharacters, controls
    "\ue000", "\U000f0000", "\u0378", "\U0001fb00", "\ufffd", "\ufeff", "\x00", "\x1b", "\u200b", "\u200d",
)  # fmt: skip

#: Arbitrary code points (no surrogates), mostly from the first planes.
CODE_POINTS = st.characters(exclude_categories=("Cs",), max_codepoint=0x2FFFF) | st.characters(
    exclude_categories=("Cs",)
)


def texts(max_pieces: int = 8) -> st.SearchStrategy[str]:
    """Short texts built from fragments and arbitrary characters."""
    piece = st.sampled_from(FRAGMENTS) | CODE_POINTS | st.text(CODE_POINTS, min_size=1, max_size=4)
    return st.lists(piece, min_size=1, max_size=max_pieces).map("".join)


def split_inputs() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"text": texts()})


def encode_inputs() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"text": texts(), "parse_special": st.booleans()})


def decode_inputs(n_vocab: int, special_ids: list[int]) -> st.SearchStrategy[dict[str, Any]]:
    """Id lists: byte tokens (a lone continuation or lead byte is partial UTF-8), special
    and control tokens, ids near the end of the vocabulary, any id."""
    byte_tokens = st.integers(0, 255)
    specials = st.sampled_from(sorted(set(special_ids))) if special_ids else st.nothing()
    top = st.integers(max(0, n_vocab - 300), n_vocab - 1)
    ids = byte_tokens | specials | top | st.integers(0, n_vocab - 1)
    return st.fixed_dictionaries({"ids": st.lists(ids, min_size=1, max_size=8)})

"""Tokenizer properties over generated text: round trip, pieces tile the input and
match CPython ``regex``, specials stay single ids, and the oracle agrees with llama.cpp,
HF tokenizers and tiktoken (live references) on NFC text.

The generator mixes scripts, whitespace runs, digits, special tokens and fragments
of them, plus arbitrary code points; CI's hypothesis profile runs 1,000 examples per
property.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from impl.text.engines import RegexSplitter
from oracle.tokenizer import Tokenizer
from specgate.supply.models import model_ref
from tests.hypothesis_budget import examples

WORDS = [
    "hello",
    " world",
    "The",
    "don't",
    " I'LL",
    "'s",
    "'RE",
    "中文",
    "，",
    "日本語",
    "한국어",
    " Ελληνικά",
    " русский",
    "مرحبا",
    "שלום",
    "क्षि",
    "ไทย",
    " café",
    "e\u0301",
    "A\u030a",
    "😀",
    "👨\u200d👩\u200d👧",
    "🇺🇸",
    "👍🏽",
    "∑",
    "½",
    "²",
    "٣",
    " документа",
    "加拿大",
    "def f(x):",
    '{"a": 1}',
    "https://x.y/z",
]
SPECIAL_FRAGMENTS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<|fim_prefix|>",
    "<|im_",
    "_end|>",
    "|>",
    "<|",
    "<",
    "｜",
    "<｜User｜>",
    "<tts_text_bos_single>",
    "<tts_text_bos>",
]
fragments = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(SPECIAL_FRAGMENTS),
    st.text(alphabet=" \t\n\r\u00a0\u3000", min_size=1, max_size=5),  # whitespace runs
    st.text(alphabet="0123456789.,", min_size=1, max_size=6),  # digits and separators
    # any assigned code point (Cn excluded: the references run different Unicode versions, see the
    # unicode-newly-assigned corpus case)
    st.text(alphabet=st.characters(exclude_categories=("Cs", "Cn")), max_size=4),
)
texts = st.lists(fragments, max_size=10).map("".join)

VOCABS = ("qwen3-vocab", "qwen3.6-vocab")
_tokenizers: dict[str, Tokenizer] = {}


def oracle(model_id: str) -> Tokenizer:
    if model_id not in _tokenizers:
        try:
            ref = model_ref(model_id)
        except Exception as exc:
            pytest.skip(f"{model_id} not in the cache: {exc}")
        _tokenizers[model_id] = Tokenizer.from_gguf(ref.gguf)
    return _tokenizers[model_id]


@pytest.mark.parametrize("model_id", VOCABS)
# 1000: issue 3's acceptance asks at least 1000 examples per tokenizer property in CI; the
# strategy mixes scripts, whitespace runs and special-token fragments (the largest input space
# of the suite's properties) and an example costs ~2 ms.
@examples(ci=1000)
@given(text=texts)
def test_round_trip(model_id, text):
    tok = oracle(model_id)
    for parse_special in (False, True):
        assert tok.decode_bytes(tok.encode(text, parse_special)) == text.encode("utf-8")


@pytest.mark.parametrize("model_id", VOCABS)
# 1000: issue 3's acceptance asks at least 1000 examples per tokenizer property in CI; the
# strategy mixes scripts, whitespace runs and special-token fragments (the largest input space
# of the suite's properties) and an example costs ~2 ms.
@examples(ci=1000)
@given(text=texts)
def test_pieces_tile_and_match_regex(model_id, text):
    pieces = oracle(model_id).split(text)
    assert "".join(pieces) == text
    assert pieces == RegexSplitter().split(model_ref(model_id), text)


@pytest.mark.parametrize("model_id", VOCABS)
# 1000: issue 3's acceptance asks at least 1000 examples per tokenizer property in CI; the
# strategy mixes scripts, whitespace runs and special-token fragments (the largest input space
# of the suite's properties) and an example costs ~2 ms.
@examples(ci=1000)
@given(before=texts, after=texts, data=st.data())
def test_specials_are_single_ids(model_id, before, after, data):
    tok = oracle(model_id)
    special = data.draw(st.sampled_from(sorted(tok.parsed.ids)))
    token_id = tok.vocab[special]  # its index in tokenizer.ggml.tokens
    assert tok.encode(before + special + after, True) == [
        *tok.encode(before, True),
        token_id,
        *tok.encode(after, True),
    ]


@pytest.mark.live
# 1000: issue 3's acceptance asks at least 1000 examples per tokenizer property in CI; the
# strategy mixes scripts, whitespace runs and special-token fragments (the largest input space
# of the suite's properties) and an example costs ~2 ms.
@examples(ci=1000)
@given(text=texts)
def test_oracle_llamacpp_hf_agree_on_nfc_text(reference, text):
    text = unicodedata.normalize("NFC", text)
    model = model_ref("qwen3-vocab")
    llama, hf = reference("llamacpp"), reference("hf")
    for parse_special in (False, True):
        ids = oracle(model.id).encode(text, parse_special)
        assert ids == llama.encode(model, text, parse_special), f"llama.cpp, parse_special={parse_special}"
    # With parsing off HF still matches tokens tokenizer.json leaves unmarked (<|fim_prefix|> …), a recorded
    # reference disagreement; with parsing on the three agree.
    assert ids == hf.encode(model, text, True), "HF tokenizers, parse_special=True"


@pytest.mark.live
# 1000: issue 3's acceptance asks at least 1000 examples per tokenizer property in CI; the
# strategy mixes scripts, whitespace runs and special-token fragments (the largest input space
# of the suite's properties) and an example costs ~2 ms.
@examples(ci=1000)
@given(text=texts)
def test_oracle_llamacpp_tiktoken_agree(reference, text):
    model = model_ref("qwen3.6-vocab")
    llama, tiktoken = reference("llamacpp"), reference("tiktoken")
    for parse_special in (False, True):
        ids = oracle(model.id).encode(text, parse_special)
        assert ids == llama.encode(model, text, parse_special), f"llama.cpp, parse_special={parse_special}"
    # tiktoken looks a whole piece up before merging; where a piece is an entry no merge produces
    # (" документа", "加拿大") it disagrees with llama.cpp — a recorded reference disagreement.
    whole_piece = any(
        len(tiktoken.encode(model, piece, False)) == 1 and len(llama.encode(model, piece, False)) > 1
        for piece in RegexSplitter().split(model, text)
    )
    assume(not whole_piece)
    for parse_special in (False, True):
        ids = oracle(model.id).encode(text, parse_special)
        assert ids == tiktoken.encode(model, text, parse_special), f"tiktoken, parse_special={parse_special}"

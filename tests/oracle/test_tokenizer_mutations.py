"""Mutation evidence for the tokenizer gates: each planted defect, patched into the
oracle, makes the very gate function ``nox -s parity`` runs fail with a message
naming the model and the case — and the unpatched oracle passes the same case.

* dropping the ``\\s+(?!\\S)`` arm           -> split gate, qwen3-vocab/ws-runs-2-5
* reinstating the whole-piece shortcut      -> encode comparison with llama.cpp's recorded ids,
  qwen3.6-vocab/vocab-unreachable-entries/plain (a recorded tiktoken/llama.cpp disagreement: tiktoken
  itself takes the shortcut)
* latest instead of earliest special match  -> encode gate, qwen2.5-coder-0.5b-instruct/special-chatml/special
* id 0 for a piece missing from the vocab   -> encode comparison against live llama.cpp on a vocabulary
  with one merge result removed (on the four real vocabularies every merge result is an entry, so no
  snapshot case can reach the fallback)
* a lossy (str) decode                      -> decode gate, qwen2.5-coder-0.5b-instruct/token-<id> (a token
  that ends inside a character)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import impl.oracle
from impl.loaded import PerModel
from impl.oracle import OracleEngine
from oracle import bpe, pretokenize
from oracle.byte_level import to_standin
from oracle.gguf import open_gguf
from oracle.special import SpecialScanner
from oracle.tokenizer import Tokenizer
from specgate.gates import test_tokenizer as gate
from specgate.supply.derive import write_vocab_only, writer_value
from specgate.supply.models import model_ref
from tests.gate_request import run_gate

GATE_FAILED = pytest.fail.Exception


def fresh(monkeypatch) -> OracleEngine:
    """An oracle engine with no tokenizer (and so no piece cache) carried over: a mutation
    must not hide behind pieces the unmutated oracle already encoded."""
    monkeypatch.setattr(impl.oracle, "_tokenizers", PerModel(limit=8))
    return OracleEngine()


@pytest.fixture
def engine(monkeypatch):
    return fresh(monkeypatch)


def cached(specgate, model_id: str):
    try:
        model = model_ref(model_id)
    except Exception as exc:
        pytest.skip(f"{model_id} not in the cache: {exc}")
    specgate.snapshot_cases(model, "encode")
    return model


def test_dropping_the_trailing_space_arm_fails_split(specgate, engine, monkeypatch):
    model, case = cached(specgate, "qwen3-vocab"), "ws-runs-2-5"
    split, encode = specgate.snapshot_cases(model, "split")[case], specgate.snapshot_cases(model, "encode")
    run_gate(gate.test_split, engine, model, model.id, case, split)
    monkeypatch.setattr(
        pretokenize, "ARMS", tuple(a for a in pretokenize.ARMS if a is not pretokenize.trailing_space)
    )
    with pytest.raises(GATE_FAILED, match=rf"(?s)\[split\] model {model.id}, case {case}: pieces differ"):
        run_gate(gate.test_split, engine, model, model.id, case, split)
    with pytest.raises(GATE_FAILED, match=rf"(?s)\[encode\] model {model.id}, case {case}/plain"):
        run_gate(gate.test_encode, engine, model, model.id, f"{case}/plain", encode[f"{case}/plain"])


def test_whole_piece_shortcut_fails_encode(specgate, engine, monkeypatch):
    # Only the Qwen3.6 vocabulary holds entries no merge produces. tiktoken, its native tokenizer, looks a
    # whole piece up before merging, so the snapshot records this case as a reference disagreement (tiktoken
    # vs llama.cpp) and the parity gate reports it as such; the encode comparison against llama.cpp's
    # recorded ids — the GGUF pipeline specgate gates — is what the shortcut breaks.
    model, case_id = cached(specgate, "qwen3.6-vocab"), "vocab-unreachable-entries/plain"
    recorded = specgate.snapshot_cases(model, "encode")[case_id]
    case = {key: recorded[key] for key in ("text", "parse_special", "ids")}
    run_gate(gate.test_encode, engine, model, model.id, case_id, case)
    merged = Tokenizer.encode_piece

    def encode_piece_with_shortcut(self: Tokenizer, piece: str) -> list[int]:
        whole = self.vocab.get(to_standin(piece.encode("utf-8")))
        return [whole] if whole is not None else merged(self, piece)

    engine = fresh(monkeypatch)
    monkeypatch.setattr(Tokenizer, "encode_piece", encode_piece_with_shortcut)
    with pytest.raises(
        GATE_FAILED, match=rf"(?s)\[encode\] model {model.id}, case {case_id} .*first divergence"
    ):
        run_gate(gate.test_encode, engine, model, model.id, case_id, case)


def test_latest_special_first_fails_encode(specgate, engine, monkeypatch):
    model, case = cached(specgate, "qwen2.5-coder-0.5b-instruct"), "special-chatml/special"
    recorded = specgate.snapshot_cases(model, "encode")[case]
    run_gate(gate.test_encode, engine, model, model.id, case, recorded)

    def find_latest(self: SpecialScanner, text: str, start: int) -> tuple[int, str] | None:
        best = None
        for first, candidates in self.by_first.items():
            pos = text.rfind(first, start)
            while pos != -1 and (best is None or pos > best[0]):
                hit = next((c for c in candidates if text.startswith(c, pos)), None)
                if hit is not None:
                    best = (pos, hit)
                    break
                pos = text.rfind(first, start, pos)
        return best

    engine = fresh(monkeypatch)
    monkeypatch.setattr(SpecialScanner, "find", find_latest)
    with pytest.raises(
        GATE_FAILED, match=rf"(?s)\[encode\] model {model.id}, case {case} .*first divergence at index 0"
    ):
        run_gate(gate.test_encode, engine, model, model.id, case, recorded)


def vocabulary_without(source: Path, token: str, out: Path) -> Path:
    """A copy of a vocab-only GGUF whose entry ``token`` is renamed, so the merge that
    builds it yields a symbol the vocabulary does not hold."""
    src = open_gguf(source, header_only=True)
    tokens = list(src.metadata["tokenizer.ggml.tokens"])
    tokens[tokens.index(token)] = f"[removed {token}]"
    meta = {**src.metadata, "tokenizer.ggml.tokens": tokens}
    kvs = [(key, *writer_value(src.types[key], value)) for key, value in meta.items()]
    write_vocab_only(out, meta["general.architecture"], kvs, alignment=meta.get("general.alignment"))
    return out


@pytest.mark.live
def test_id_zero_for_unknown_piece_fails_encode(specgate, engine, monkeypatch, reference, tmp_path):
    base = cached(specgate, "qwen3-vocab")
    path = vocabulary_without(base.gguf, "the", tmp_path / "qwen3-vocab-without-the.gguf")
    model = type(base)(id="qwen3-vocab-without-the", gguf=path, sha256="-", role="vocab-only")
    text, case_id = "the cat", "the-cat/plain"
    case = {"text": text, "parse_special": False, "ids": reference("llamacpp").encode(model, text, False)}
    run_gate(gate.test_encode, engine, model, model.id, case_id, case)  # byte fallback: t, h, e, as llama.cpp
    engine = fresh(monkeypatch)
    monkeypatch.setattr(bpe, "to_ids", lambda symbols, vocab: [vocab.get(s, 0) for s in symbols])
    with pytest.raises(
        GATE_FAILED, match=rf"(?s)\[encode\] model {model.id}, case {case_id} .*first divergence at index 0"
    ):
        run_gate(gate.test_encode, engine, model, model.id, case_id, case)


def test_lossy_decode_fails_decode(specgate, engine, monkeypatch):
    # A decoder that goes through str (as a per-token from_utf8_lossy would) loses the bytes of a token
    # that ends inside a character; the decode snapshot holds such single-token cases.
    model = cached(specgate, "qwen2.5-coder-0.5b-instruct")
    case = next(c for c in specgate.snapshot_cases(model, "decode") if c.startswith("token-"))
    recorded = specgate.snapshot_cases(model, "decode")[case]
    run_gate(gate.test_decode, engine, model, model.id, case, recorded)
    exact = Tokenizer.decode_bytes
    engine = fresh(monkeypatch)
    monkeypatch.setattr(
        Tokenizer, "decode_bytes", lambda self, ids: exact(self, ids).decode("utf-8", "replace").encode()
    )
    with pytest.raises(
        GATE_FAILED, match=rf"(?s)\[decode\] model {model.id}, case {case}: bytes differ .* at byte \d"
    ):
        run_gate(gate.test_decode, engine, model, model.id, case, recorded)

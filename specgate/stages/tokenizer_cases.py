"""How the tokenizer stages' cases are built from the references (``Stage.build``):
``split_cases`` (CPython ``regex`` pieces, HF's pre-tokenizer where Unicode versions
skew), ``encode_cases`` (llama.cpp's ids, cross-checked by HF tokenizers and tiktoken,
each disagreement explained) and ``decode_cases`` (llama.cpp's bytes of the encode
ids, of partial-character tokens and of the decode corpus). The reference adapters
are arguments: the recorder (``tests/references/test_tokenizer.py``) fetches them;
llama.cpp's vocabulary handle is read through ``impl.llamacpp.tokenizer``, which
imports ``llama_cpp`` only when called."""

from __future__ import annotations

import unicodedata
from typing import Any

from impl.llamacpp import tokenizer as llamacpp_tokenizer
from impl.text.engines import RegexSplitter
from oracle.utf8 import is_utf8
from specgate.checks.tokenizer import unicode_version_skew
from specgate.outcomes.gate import first_difference, first_divergence
from specgate.upkeep.corpus import MODES, tokenizer_texts
from specgate.upkeep.corpus import decode_cases as decode_corpus

#: Single-token decode cases per model whose bytes end inside a character.
PARTIAL_TOKEN_CASES = 12


def hf_pieces(hf: Any, model: Any, text: str) -> list[str]:
    """HF tokenizers' pre-tokenizer pieces of ``text`` (its own regex engine, Oniguruma,
    with its own Unicode tables), cut from the text by their character offsets."""
    return [text[a:b] for _, (a, b) in hf._tokenizer(model).pre_tokenizer.pre_tokenize_str(text)]


def split_cases(regex: Any, hf: Any | None, model: Any) -> dict[str, Any]:
    """The split reference's pieces of every tokenizer text; where the text meets a
    Unicode-version skew, HF's pieces as a cross-check (``hf`` None: HF cannot load
    this vocabulary, and the case says so)."""
    recorded = {
        cid: {"text": c["text"], "pieces": regex.split(model, c["text"])}
        for cid, c in tokenizer_texts().items()
    }
    for case in recorded.values():
        skew = unicode_version_skew(case["text"])
        if skew is None:
            continue  # the split reference is exact: only Unicode-version skew makes references differ
        other = hf_pieces(hf, model, case["text"]) if hf is not None else None
        if other is None:
            case["disagreement"] = (
                f"{skew}; no other split reference loads this vocabulary (HF cannot convert it)"
            )
        elif other != case["pieces"]:
            case["disagreement"] = f"HF tokenizers' pre-tokenizer splits differently: {skew}"
            case["sources"] = {"hf": other}
    return recorded


def untiled(recorded: dict[str, Any]) -> list[str]:
    """The split cases whose pieces do not join back to their text."""
    return [cid for cid, c in recorded.items() if "".join(c["pieces"]) != c["text"]]


def explain(
    model: Any,
    llm: Any,
    name: str,
    ref: Any,
    text: str,
    parse_special: bool,
    ids: list[int],
    other: list[int],
) -> str:
    """Why reference ``name`` disagrees with llama.cpp on this text."""
    mode = "on" if parse_special else "off"
    if name == "hf" and model.tokenizer_json is not None:
        nfc = unicodedata.normalize("NFC", text)
        if nfc != text and llamacpp_tokenizer.encode(llm, nfc, parse_special) == other:
            return (
                "NFC: tokenizer.json normalizes the text to NFC before splitting; the GGUF pipeline "
                "(llama.cpp, specgate) does not normalize"
            )
    if name == "hf":
        added = ref._tokenizer(model).get_added_tokens_decoder()
        hf_only = [i for i in other if i in added and i not in ids]
        if hf_only:
            tok, i = added[hf_only[0]], hf_only[0]
            if i >= llm.n_vocab():
                return (
                    f"transformers' GGUF tokenizer conversion appends {tok.content!r} as a new added token "
                    f"(id {i}, outside the GGUF's {llm.n_vocab()}-token vocabulary); llama.cpp encodes the "
                    "string as text"
                )
            return (
                f"HF matches {tok.content!r} (id {i}, {'special' if tok.special else 'not special'} in HF) "
                f"as one token with special-token parsing {mode}; the GGUF types it control, so llama.cpp "
                "encodes it as text"
            )
        llama_only = [i for i in ids if i not in other and llamacpp_tokenizer.is_control(llm, i)]
        if parse_special and llama_only:
            piece = llamacpp_tokenizer.token_to_piece(llm, llama_only[0]).decode("utf-8", "replace")
            return (
                f"transformers' GGUF tokenizer conversion does not register {piece!r} (id {llama_only[0]}, "
                "a control token of the GGUF) as an added token, so HF splits it as text"
            )
    if name == "tiktoken":
        k = first_difference(ids[: len(other)], other[: len(ids)])
        piece = ref._encoding(model).decode_single_token_bytes(other[k]) if k is not None else b""
        pieces = [p.encode("utf-8") for p in RegexSplitter().split(model, text)]
        if piece in pieces:
            return (
                f"tiktoken encodes the pre-tokenizer piece {piece.decode('utf-8', 'replace')!r} as its own rank "
                f"entry (id {other[k]}) without merging — a whole-piece lookup; no merge produces that entry, "
                "so llama.cpp's greedy merges split it (specgate: no whole-piece shortcut)"
            )
    where = first_divergence(ids, other, show=lambda i: repr(llamacpp_tokenizer.token_to_piece(llm, i)))
    return f"{name} disagrees with llama.cpp (special-token parsing {mode}): {where}"


def special_stretches(llm: Any, ids: list[int]) -> list[list[int]]:
    """The ids of each stretch between special tokens (the special ids left out; a
    special id at either end or two in a row give an empty stretch)."""
    segments: list[list[int]] = [[]]
    for i in ids:
        if llamacpp_tokenizer.is_special(llm, i):
            segments.append([])
        else:
            segments[-1].append(i)
    return segments


def regex_split_ids(regex: Any, model: Any, llm: Any, ids: list[int]) -> list[int]:
    """The ids llama.cpp's merges give over CPython ``regex``'s pre-tokenizer split (the
    split gate's reference): llama.cpp's ids with each stretch between special tokens
    re-encoded one regex piece at a time."""
    out: list[int] = []
    stretch: list[int] = []
    for i in [*ids, None]:
        if i is not None and not llamacpp_tokenizer.is_special(llm, i):
            stretch.append(i)
            continue
        if stretch:
            text = b"".join(llamacpp_tokenizer.token_to_piece(llm, j) for j in stretch).decode("utf-8")
            out += [j for p in regex.split(model, text) for j in llamacpp_tokenizer.encode(llm, p, False)]
            stretch = []
        if i is not None:
            out.append(i)
    return out


def split_disagreement(
    regex: Any, model: Any, llm: Any, text: str, ids: list[int]
) -> tuple[str, list[int]] | None:
    """Whether llama.cpp pre-tokenizes this text differently from the split reference
    (CPython ``regex``): between special tokens, llama.cpp's ids must be its own
    encodings of the regex pieces, one piece at a time. The reason and the ids of the
    regex split (an engine following the split reference's Unicode tables answers them)."""
    crossed = None
    for seg in special_stretches(llm, ids):
        stretch = b"".join(llamacpp_tokenizer.token_to_piece(llm, i) for i in seg).decode("utf-8")
        per_piece = [i for p in regex.split(model, stretch) for i in llamacpp_tokenizer.encode(llm, p, False)]
        if per_piece != seg:
            crossed = stretch
            break
    if crossed is None:
        return None
    skew = unicode_version_skew(text)
    why = f"; {skew}" if skew else ""
    reason = f"llama.cpp's pre-tokenizer split differs from CPython regex's in {crossed[:60]!r}{why}"
    return reason, regex_split_ids(regex, model, llm, ids)


def encode_cases(llama: Any, regex: Any, refs: dict[str, Any], model: Any) -> dict[str, Any]:
    """llama.cpp's ids of every tokenizer text in both special-token modes
    (``<text id>/<mode>``), with the regex split's ids where llama.cpp pre-tokenizes
    differently and every cross-reference of ``refs`` (name -> adapter) that disagrees,
    explained (``explain``)."""
    llm = llama.llama(model, vocab_only=True)
    out: dict[str, Any] = {}
    for cid, c in tokenizer_texts().items():
        for mode, parse_special in MODES.items():
            ids = llama.encode(model, c["text"], parse_special)
            case: dict[str, Any] = {"text": c["text"], "parse_special": parse_special, "ids": ids}
            split_skew = split_disagreement(regex, model, llm, c["text"], ids)
            if split_skew:
                case["disagreement"], case.setdefault("sources", {})["regex-split"] = split_skew
            for name, ref in refs.items():
                other = ref.encode(model, c["text"], parse_special)
                if other != ids:
                    case.setdefault("sources", {})[name] = other
                    case.setdefault(
                        "disagreement", explain(model, llm, name, ref, c["text"], parse_special, ids, other)
                    )
            out[f"{cid}/{mode}"] = case
    return out


def composed_ids(llm: Any, parts: list[dict[str, Any]], strict: bool = True) -> list[int] | None:
    """The ids of a decode-corpus case on this vocabulary (``specgate.upkeep.corpus.decode_cases``),
    or None when the vocabulary lacks one of its special tokens. A ``head`` that does not end
    inside a character is a corpus mistake on the manifest's vocabularies (``strict``); a
    user's own vocabulary may simply hold the whole character, and does not get the case."""
    ids: list[int] = []
    for part in parts:
        [(kind, text)] = part.items()
        if kind == "text":
            ids += llamacpp_tokenizer.encode(llm, text, False)
        elif kind == "special":
            one = llamacpp_tokenizer.encode(llm, text, True)
            if len(one) != 1 or not llamacpp_tokenizer.is_special(llm, one[0]):
                return None  # not a special token of this vocabulary
            ids += one
        elif kind == "unused":
            unused = llamacpp_tokenizer.unused_ids(llm)
            if not unused:
                return None  # this vocabulary has no unused fillers
            ids.append(unused[0] if text == "first" else unused[-1])
        elif kind == "id":  # at or past the vocabulary's edge
            n = llm.n_vocab()
            ids.append({"last": n - 1, "n_vocab": n, "n_vocab+1": n + 1}.get(text, text))
        else:
            whole = llamacpp_tokenizer.encode(llm, text, False)
            split_inside = len(whole) > 1 and not is_utf8(llamacpp_tokenizer.token_to_piece(llm, whole[0]))
            if not split_inside and not strict:
                return None
            if not split_inside:
                raise ValueError(
                    f"decode corpus: {text!r} is not split inside a character by this vocabulary ({whole})"
                )
            ids += whole[:1] if kind == "head" else whole[1:]
    return ids


def beyond_vocabulary(
    llama: Any, llm: Any, model: Any, ids: list[int], others: dict[str, Any]
) -> dict[str, Any]:
    """A decode case, with ids past the vocabulary skipped (PROTOCOL.md 4.2). llama.cpp's
    ``token_to_piece`` aborts the process on such an id, so its answer is its bytes of the
    ids inside the vocabulary; the note says so, and what the other references answer
    (one that answers other bytes is recorded as a disagreement with its bytes)."""
    n = llm.n_vocab()
    outside = [i for i in ids if not 0 <= i < n]
    case: dict[str, Any] = {"ids": ids, "hex": llama.decode(model, [i for i in ids if 0 <= i < n]).hex()}
    if not outside:
        return case
    notes = [
        f"ids {outside} lie outside the {n}-token vocabulary and are skipped (PROTOCOL.md 4.2); llama.cpp's "
        "token_to_piece aborts the process on them, so the reference is its bytes of the other ids"
    ]
    for name, ref in others.items():
        try:
            other = ref.decode(model, ids).hex()
        except Exception as exc:  # a reference that cannot decode them answers nothing to match
            notes.append(f"{name} raises {type(exc).__name__} on them: {str(exc)[:120]}")
            continue
        if other == case["hex"]:
            notes.append(f"{name} skips them too")
        else:
            case.setdefault("sources", {})[name] = other
            case.setdefault(
                "disagreement",
                f"{name} decodes these ids to {other}, llama.cpp (skipping ids {outside}) to {case['hex']}",
            )
    case["note"] = "; ".join(notes)
    return case


def partial_tokens(llm: Any, id_lists: list[list[int]], limit: int = PARTIAL_TOKEN_CASES) -> list[int]:
    """Up to ``limit`` distinct ids, in order of first use, whose own bytes are not
    valid UTF-8 (a token that ends or starts inside a character)."""
    found: list[int] = []
    for ids in id_lists:
        for i in ids:
            if (
                len(found) < limit
                and i not in found
                and not is_utf8(llamacpp_tokenizer.token_to_piece(llm, i))
            ):
                found.append(i)
    return found


def decode_cases(
    llama: Any,
    model: Any,
    encoded: dict[str, Any],
    others: dict[str, Any],
    tiktoken: Any | None = None,
    strict: bool = True,
) -> dict[str, Any]:
    """llama.cpp's bytes of the special-parsing ids of the encode cases ``encoded`` (each
    must round-trip its text), of single tokens ending inside a character
    (``token-<id>``) and of the decode corpus (``composed_ids``; ids past the vocabulary
    cross-checked by ``others``, ``beyond_vocabulary``); tiktoken, where the model ships
    ranks, cross-checks the rest. ``strict``: the corpus must fit this vocabulary."""
    llm = llama.llama(model, vocab_only=True)
    recorded: dict[str, Any] = {}
    special = {cid: case for cid, case in encoded.items() if case["parse_special"]}
    # the special-parsing ids cover every token the plain ones use, and more
    for cid, case in special.items():
        data = llama.decode(model, case["ids"])
        if data != case["text"].encode("utf-8"):
            raise ValueError(f"{model.id}/{cid}: llama.cpp does not round-trip the text")
        recorded[cid.removesuffix("/special")] = {"ids": case["ids"], "hex": data.hex()}
    for i in partial_tokens(llm, [case["ids"] for case in special.values()]):
        recorded[f"token-{i}"] = {"ids": [i], "hex": llama.decode(model, [i]).hex()}
    for cid, parts in decode_corpus().items():
        if cid in recorded:
            raise ValueError(f"decode corpus id {cid!r} collides with a text case")
        ids = composed_ids(llm, parts, strict=strict)
        if ids is not None:
            recorded[cid] = beyond_vocabulary(llama, llm, model, ids, others)
    if tiktoken is not None:
        for case in recorded.values():
            if "note" in case:
                continue  # ids past the vocabulary: cross-checked by beyond_vocabulary
            other = tiktoken.decode(model, case["ids"]).hex()
            if other != case["hex"]:
                case["disagreement"] = (
                    f"tiktoken decode_bytes gives {other} where llama.cpp gives {case['hex']}"
                )
    return recorded

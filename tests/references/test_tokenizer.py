"""Record the tokenizer references for every vocabulary model, per stage:

* ``split``  — CPython ``regex`` ``findall`` of the model's tokenizer-file pattern for
  its ``tokenizer.ggml.pre`` rule (``corpus/pretokenizer_patterns.json``);
* ``encode`` — llama.cpp ``llama_tokenize`` on the same GGUF, with and without
  special-token parsing (case ids ``<text id>/plain`` and ``<text id>/special``),
  cross-checked with HF tokenizers (tokenizer.json where shipped, else transformers'
  tokenizer built from the GGUF) and with tiktoken where the model ships ranks;
* ``decode`` — llama.cpp ``llama_token_to_piece`` bytes, concatenated, for every id
  sequence of the encode snapshot, single tokens that end inside a character, and the
  id sequences of ``corpus/texts/decode.jsonl`` (special ids alone or next to text,
  bytes ending or breaking inside a character).

Where a cross-check disagrees with llama.cpp the case is stored as a reference
disagreement with the reason (NFC normalization in tokenizer.json, a different
special-token split, a GGUF conversion gap). specgate gates the GGUF pipeline's
semantics: no normalization, explicit ``parse_special``. How each case is built is the
stage's (``specgate.stages.tokenizer_cases``); a recorder fetches the references, builds
and writes the snapshot.
"""

from __future__ import annotations

from typing import Any

import pytest

from impl.protocol import Unsupported
from specgate.stages import STAGES
from specgate.stages.tokenizer_cases import untiled
from specgate.supply.models import is_known_id
from specgate.upkeep import snapshots
from specgate.upkeep.corpus import TOKENIZER_MODELS


def has_a_vocabulary(model_id: str) -> bool:
    """The manifest's vocabulary models, and a user's own GGUF (every GGUF has a vocabulary)."""
    return model_id in TOKENIZER_MODELS or not is_known_id(model_id)


pytestmark = [pytest.mark.live, pytest.mark.applies_to.with_args(has_a_vocabulary)]


@pytest.fixture(scope="module")
def encoded() -> dict[str, dict[str, Any]]:
    """Each model's encode cases, built once in this module's run: the decode recorder
    composes its ids from them. Owned by the fixture (no module global), so the decode
    recorder run alone builds them itself."""
    return {}


def test_record_split(request, reference, model_id, model):
    regex = reference("regex")
    recorded = STAGES["split"].build(regex, cross_references(reference, model).get("hf"), model)
    bad = untiled(recorded)
    assert not bad, f"{model_id}: the reference pattern does not tile these texts: {bad}"
    snapshots.record(
        request,
        regex,
        model,
        "split",
        recorded,
        references={
            "regex": "regex.findall(<tokenizer-file pattern for tokenizer.ggml.pre>, text)",
            "hf": "cross-check of texts with Unicode-version skew: pre_tokenizer.pre_tokenize_str offsets",
        },
        packages=("regex", "tokenizers"),
    )


def cross_references(reference: Any, model: Any) -> dict[str, Any]:
    """The references that encode this model besides llama.cpp."""
    refs = {}
    if model.tiktoken is not None:
        refs["tiktoken"] = reference("tiktoken")
    try:
        hf = reference("hf")
        hf._tokenizer(model)
        refs["hf"] = hf
    except Unsupported:
        pass  # transformers cannot convert this GGUF's tokenizer: HF is no reference here
    return refs


def encode_cases(reference: Any, model: Any, encoded: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if model.id not in encoded:
        refs = cross_references(reference, model)
        encoded[model.id] = STAGES["encode"].build(reference("llamacpp"), reference("regex"), refs, model)
    return encoded[model.id]


def test_record_encode(request, reference, model_id, model, encoded):
    recorded = encode_cases(reference, model, encoded)
    names = {"llamacpp": "llama_tokenize(add_special=False, parse_special=<case>) on the GGUF"}
    for name in cross_references(reference, model):
        names[name] = {
            "hf": "cross-check: tokenizers.Tokenizer (tokenizer.json, or transformers' GGUF conversion)"
            ".encode(add_special_tokens=False, encode_special_tokens=not parse_special)",
            "tiktoken": "cross-check: tiktoken Encoding(.tiktoken ranks, Qwen3.5 pattern and specials)",
        }[name]
    snapshots.record(
        request,
        reference("llamacpp"),
        model,
        "encode",
        recorded,
        references=names,
        packages=("llama-cpp-python", "tokenizers", "transformers", "tiktoken"),
    )


def test_record_decode(request, reference, model_id, model, encoded):
    llama = reference("llamacpp")
    tiktoken = reference("tiktoken") if model.tiktoken is not None else None
    others = cross_references(reference, model)
    recorded = STAGES["decode"].build(
        llama,
        model,
        encode_cases(reference, model, encoded),
        others,
        tiktoken,
        strict=model_id in TOKENIZER_MODELS,
    )
    snapshots.record(
        request,
        llama,
        model,
        "decode",
        recorded,
        references={
            "llamacpp": "b''.join(llama_token_to_piece(id, special=True)) on the GGUF, ids outside the "
            "vocabulary skipped",
            **({"tiktoken": "cross-check: Encoding.decode_bytes"} if tiktoken else {}),
            **{
                name: f"cross-check of ids past the vocabulary: {name} decode"
                for name in others
                if name != "tiktoken"
            },
        },
        packages=("llama-cpp-python", "tiktoken", "tokenizers"),
    )

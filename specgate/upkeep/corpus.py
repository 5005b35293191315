"""The corpus: every input the references are recorded on, read from ``corpus/``.

* **Render** — ``corpus/conversations/<id>.json`` (``{"description", "messages",
  "kwargs", "add_generation_prompt": [true, false]}``): each conversation is one case
  per listed ``add_generation_prompt`` value, case id ``<id>/gen`` or ``<id>/no-gen``;
  ``kwargs`` (``tools``, ``documents``, ``enable_thinking``) go to the template.
  ``corpus/templates/constructs/<id>.json`` (``{"construct", "template",
  "context"}``): one Jinja construct the published Qwen/DeepSeek templates use; its
  snapshot is model-independent (``snapshots/constructs/render_template.json``),
  recorded under the pseudo model ``constructs`` whose "sha256" is the digest of the
  construct corpus (editing a construct makes the snapshot stale, loudly).
  ``corpus/templates/hostile/<id>.jinja``: templates that must be refused; the first
  line is ``{#- expect: <text the refusal must contain> -#}``.
* **Conversation (state)** — ``corpus/conversations/multi_turn/<id>.json``
  (``{"description", "shape", "kwargs", "turns": [{"append": [messages], "system":
  optional new system prompt, "kwargs": optional template keywords from this turn
  on}]}``): multi-turn conversations played turn by turn through the oracle's
  conversation mode (``oracle.conversation``) and the drift table
  (``specgate.upkeep.drift_table``). They live in a subfolder so the render gate's
  one-shot cases (``render_cases``, the top folder only) are not changed by them.
* **Tokenizer** — ``corpus/texts/tokenizer.jsonl`` (one case per line: id, category,
  text), ``corpus/texts/decode.jsonl`` (id sequences no text encodes to: special and
  unused ids, bytes ending or breaking inside a character) and the vocabulary models
  the tokenizer stages gate.
* **Forward** — ``corpus/prompts/prompts.jsonl`` (id, kind — ``chat`` rendered in
  ChatML or ``raw`` text —, whether the tiny models use it, text) and how much of the
  reference logits a snapshot keeps.

The snapshots carry the inputs they were recorded on, so the gates read only the
snapshots; these loaders serve the recording tests, the oracle's own tests and triage.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT
from impl.protocol import ModelRef

CORPUS = DATA_ROOT / "corpus"

# ---------------------------------------------------------------------------
# render

CONVERSATIONS = CORPUS / "conversations"
CONSTRUCTS = CORPUS / "templates" / "constructs"
HOSTILE = CORPUS / "templates" / "hostile"
CONSTRUCTS_MODEL_ID = "constructs"
# The models that ship a chat template (the render gate runs every conversation through each).
TEMPLATE_MODELS = ("qwen2.5-coder-0.5b-instruct", "deepseek-r1-distill-qwen-7b-vocab", "qwen3-vocab")


@dataclass(frozen=True)
class RenderCase:
    conversation: str
    messages: list[dict[str, Any]]
    add_generation_prompt: bool
    kwargs: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> dict[str, Any]:
        """The case's inputs as a snapshot stores them beside the reference's output."""
        return {
            "messages": self.messages,
            "add_generation_prompt": self.add_generation_prompt,
            "kwargs": self.kwargs,
        }


def render_cases() -> dict[str, RenderCase]:
    cases = {}
    for path in sorted(CONVERSATIONS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for gen in data["add_generation_prompt"]:
            cases[f"{path.stem}/{'gen' if gen else 'no-gen'}"] = RenderCase(
                path.stem, data["messages"], gen, data.get("kwargs", {})
            )
    return cases


MULTI_TURN = CONVERSATIONS / "multi_turn"


@cache
def multi_turn_conversations() -> dict[str, dict[str, Any]]:
    """conversation id -> ``{"description", "shape", "kwargs", "turns"}``, in id order."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(MULTI_TURN.glob("*.json"))}


def constructs() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CONSTRUCTS.glob("*.json"))}


def constructs_model() -> ModelRef:
    """The pseudo model the construct snapshot is recorded under."""
    digest = hashlib.sha256()
    for path in sorted(CONSTRUCTS.glob("*.json")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return ModelRef(id=CONSTRUCTS_MODEL_ID, gguf=CONSTRUCTS, sha256=digest.hexdigest(), role="corpus")


_EXPECT = re.compile(r"\{#- expect: (.*?) -#\}")


def hostile_templates() -> dict[str, tuple[str, str]]:
    """``{id: (template source, text the refusal must contain)}``."""
    out = {}
    for path in sorted(HOSTILE.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        match = _EXPECT.match(source)
        if match is None:
            raise ValueError(f"{path}: first line must be '{{#- expect: ... -#}}'")
        out[path.stem] = (source, match.group(1))
    return out


# ---------------------------------------------------------------------------
# tokenizer

TOKENIZER_TEXTS = CORPUS / "texts" / "tokenizer.jsonl"
# Every manifest model with a vocabulary the tokenizer stage covers.
TOKENIZER_MODELS = (
    "qwen2.5-coder-0.5b-instruct",
    "deepseek-r1-distill-qwen-7b-vocab",
    "qwen3-vocab",
    "qwen3.6-vocab",
)
MODES = {"plain": False, "special": True}  # encode case suffix -> parse_special


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object per line (split on ``\\n`` only: texts hold U+2028, which
    ``splitlines`` would cut)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


@cache
def tokenizer_texts() -> dict[str, dict[str, str]]:
    """case id -> {"category", "text"}, in file order."""
    return {c["id"]: {"category": c["category"], "text": c["text"]} for c in _jsonl(TOKENIZER_TEXTS)}


DECODE_IDS = CORPUS / "texts" / "decode.jsonl"
DECODE_PREFIX = "ids-"  # decode case ids from DECODE_IDS: ids-<id>, apart from the text ids


@cache
def decode_cases() -> dict[str, list[dict[str, Any]]]:
    """case id -> its parts, in file order. Each part is one kind of ids, resolved per
    model by the reference tokenizer (llama.cpp) when the decode snapshot is recorded:

    * ``{"text": s}`` — the ids of ``s`` without special-token parsing;
    * ``{"special": s}`` — the one id ``s`` is with special-token parsing (a model
      without that token does not get the case);
    * ``{"head": s}`` / ``{"tail": s}`` — the first id of ``s`` / the ids after it, where
      the first id's bytes end inside a character of ``s``;
    * ``{"unused": "first"}`` / ``{"unused": "last"}`` — the first / last id the
      vocabulary types unused (the ``[PAD<id>]`` fillers; a model without any does not
      get the case);
    * ``{"id": "last"}``, ``{"id": "n_vocab"}``, ``{"id": "n_vocab+1"}`` or ``{"id": N}``
      — the vocabulary's last id, the first ids past it, or id N (999999: past every
      vocabulary). PROTOCOL.md section 4.2: ids outside the vocabulary are skipped
      (never negative: the protocol's token ids are non-negative integers).
    """
    return {DECODE_PREFIX + c["id"]: c["parts"] for c in _jsonl(DECODE_IDS)}


# ---------------------------------------------------------------------------
# forward (logits)

PROMPTS = CORPUS / "prompts" / "prompts.jsonl"
TOP_K = 64  # reference tokens kept per position
# Positions kept per prompt: every position up to this many, else this many evenly spaced
# (first and last included). ~2.3 kB of JSON per position (two references × 64 ids and
# log-probs); the real model keeps up to 32 (~0.7 MB), each of the 27 tiny models up to 8
# of its 5 prompts (~80 kB).
POSITIONS = {"real": 32, "tiny": 8}


@cache
def prompts() -> dict[str, dict[str, object]]:
    return {case["id"]: case for case in _jsonl(PROMPTS)}


def is_tiny(model_id: str) -> bool:
    return model_id.startswith("tiny-")


def prompts_for(model_id: str) -> dict[str, dict[str, object]]:
    """All prompts for a real model; the ``tiny`` subset (1 to 512 tokens) for tiny ones."""
    return {k: p for k, p in prompts().items() if p["tiny"] or not is_tiny(model_id)}


# ---------------------------------------------------------------------------
# forward (trace)

TRACE_PROMPTS = CORPUS / "prompts" / "trace.jsonl"
# Tokens kept of each trace prompt (its first ones). The snapshot holds every point of every
# layer at every position, float32 for transformers and float16 for llama.cpp (base64):
# ~1.3 MB per position on the 0.5B model (24 layers; 7.7 MB for 6), 12-27 kB on a tiny one.
TRACE_TOKENS = {"real": 6, "tiny": 8}
TRACE_TOP_COLUMNS = 16  # logits columns kept per position: the union of both references' top 16


def trace_prompts() -> dict[str, str]:
    return {case["id"]: str(case["text"]) for case in _jsonl(TRACE_PROMPTS)}

"""The render stage's corpus: conversations, construct templates, hostile templates.

* ``corpus/conversations/<id>.json`` — ``{"description", "messages", "kwargs",
  "add_generation_prompt": [true, false]}``; each conversation is one case per
  listed ``add_generation_prompt`` value, case id ``<id>/gen`` or ``<id>/no-gen``.
  ``kwargs`` (``tools``, ``documents``, ``enable_thinking``) go to the template.
* ``corpus/templates/constructs/<id>.json`` — ``{"construct", "template",
  "context"}``: one Jinja construct the published Qwen/DeepSeek templates use.
  Its snapshot is model-independent: ``snapshots/constructs/render_template.json``,
  recorded under the pseudo model id ``constructs`` whose "sha256" is the digest
  of the construct corpus (editing a construct makes the snapshot stale, loudly).
* ``corpus/templates/hostile/<id>.jinja`` — templates that must be refused; the
  first line is ``{#- expect: <text the refusal must contain> -#}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from impl.protocol import ModelRef

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
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


def render_cases() -> dict[str, RenderCase]:
    cases = {}
    for path in sorted(CONVERSATIONS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for gen in data["add_generation_prompt"]:
            cases[f"{path.stem}/{'gen' if gen else 'no-gen'}"] = RenderCase(
                path.stem, data["messages"], gen, data.get("kwargs", {})
            )
    return cases


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

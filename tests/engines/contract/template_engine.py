"""A template engine written from PROTOCOL.md alone: plain jinja2 following the render
rules of section 4.1, serving `render` and `render_template`. Imports nothing from
specgate; reads the GGUF's metadata with the `gguf` package.

    python tests/engines/contract/template_engine.py
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jinja2
import jinja2.ext
from gguf import GGUFReader
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jsonl import Refusal, serve

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
SPECIAL_TOKEN_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` renders its body."""

    tags = {"generation"}  # noqa: RUF012

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _body(caller: Any) -> str:
        return caller()


class TemplateRaised(Exception):
    pass


def raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@cache
def environment() -> jinja2.Environment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, GenerationBlock]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_source(source: str, context: dict[str, Any]) -> str:
    try:
        return environment().from_string(source).render(**context)
    except TemplateRaised as exc:
        raise Refusal(f"the template raised: {exc}") from None
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, ArithmeticError, AttributeError) as exc:
        raise Refusal(f"the template cannot render: {type(exc).__name__}: {exc}") from None


# --- the model's template and special tokens -----------------------------------------------


def gguf_value(reader: GGUFReader, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


@cache
def model_template(gguf_path: str, tokenizer_config: str | None) -> tuple[str, dict[str, str]]:
    reader = GGUFReader(gguf_path)
    tokens = gguf_value(reader, "tokenizer.ggml.tokens") or []
    specials = {}
    for name, key in SPECIAL_TOKEN_IDS.items():
        token_id = gguf_value(reader, key)
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            specials[name] = tokens[int(token_id)]
    source = gguf_value(reader, "tokenizer.chat_template")
    if source is None and tokenizer_config:
        source = json.loads(Path(tokenizer_config).read_text(encoding="utf-8")).get("chat_template")
        if isinstance(source, list):
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
    if source is None:
        raise Refusal("the model has no chat template (the ChatML fallback is not implemented here)")
    return source, specials


def normalized(message: dict[str, Any]) -> dict[str, Any]:
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in REASONING_KEYS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def render(request: dict[str, Any]) -> str:
    model = request["model"]
    source, specials = model_template(model["gguf"], model.get("tokenizer_config"))
    messages = request["messages"]
    if not messages:
        raise Refusal("an empty conversation cannot be rendered")
    kwargs = dict(request.get("kwargs") or {})
    context = {
        "messages": [normalized(m) for m in messages],
        "tools": kwargs.pop("tools", None),
        "documents": kwargs.pop("documents", None),
        "add_generation_prompt": request.get("add_generation_prompt", True),
        **specials,
        **kwargs,
    }
    return render_source(source, context)


HANDLERS = {
    "render": render,
    "render_template": lambda req: render_source(req["template"], req["context"]),
}

if __name__ == "__main__":
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "contract-template",
        "version": "0.1",
        "capabilities": ["render"],
    }
    sys.exit(serve(hello, HANDLERS))

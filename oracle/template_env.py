"""transformers' chat-template environment: what a template sees, and nothing more.

transformers renders chat templates in an ``ImmutableSandboxedEnvironment`` with
``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension, a
``{% generation %}`` tag, its own ``tojson`` (no HTML escaping, non-ASCII kept),
``raise_exception``, ``strftime_now``, a restricted ``dict`` and a ``namespace``
that rejects underscore names. ``TransformersEnvironment`` reproduces that
configuration exactly, so every template a real model ships renders to the same
bytes. It bounds no work: ``oracle.template_sandbox`` builds on it with the limits.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message: str) -> None:
    """What a template calls to reject a conversation; the message must surface."""
    raise jinja2.exceptions.TemplateError(message)


def tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson``: plain ``json.dumps`` (jinja2's escapes ``<>&'``)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    """The current local time, formatted (templates print today's date)."""
    return datetime.now().strftime(format)


class TemplateDict:
    """``dict`` for templates: callable and ``fromkeys``, nothing else to reach through."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore-prefixed names, as transformers' does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}`` marks assistant text for training masks;
    when rendering it is transparent (transformers' ``AssistantTracker``, inactive)."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's extension API

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _render_body(caller: Any) -> str:
        return caller()


class TransformersEnvironment(ImmutableSandboxedEnvironment):
    """The environment transformers' ``apply_chat_template`` renders in."""

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
        )
        self.filters["tojson"] = tojson
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = TemplateDict()
        self.globals["namespace"] = TemplateNamespace

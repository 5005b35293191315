"""A template engine whose render defects are chosen on its command line: the oracle
served over PROTOCOL.md with classic chat-template bugs planted, to check that each
render diagnosis of ``specgate.diagnose`` names its own bug and not a look-alike. The
plants are written here, independently of the diagnosis catalogue (they patch the
served oracle's modules, rewrite template sources, or wrap its answers).

    python tests/engines/fixable_template.py [--defects tojson_html,no_gen,...]
"""

from __future__ import annotations

import json
import re
import sys

import jinja2.utils
from planted_defects import serve_with_defects  # the sibling module (this script's folder is on sys.path)

from oracle import template, template_env, template_sandbox


def wrap_tojson(change) -> None:
    original = template_env.tojson
    template_env.tojson = lambda x, *args, **kwargs: change(original, x, *args, **kwargs)


def html_tojson(original, x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """jinja2's own tojson escaping, with transformers' dumps settings."""
    dumps = lambda v, **kw: json.dumps(v, **kw)  # noqa: E731
    return str(
        jinja2.utils.htmlsafe_json_dumps(
            x,
            dumps=dumps,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )
    )


def ascii_tojson(original, x, ensure_ascii=False, **kwargs):
    return original(x, True, **kwargs)


def environment_settings(**settings) -> None:
    environment = template.environment()
    for name, value in settings.items():
        setattr(environment, name, value)


def js_booleans() -> None:
    finalize = template_sandbox.TemplateSandbox._finalize_output
    template_sandbox.TemplateSandbox._finalize_output = staticmethod(
        lambda v: {True: "true", False: "false"}[v] if isinstance(v, bool) else finalize(v)
    )


_STRIP_CALL = re.compile(r"\.(l|r)?strip\((?:'[^']*'|\"[^\"]*\")\)")
_TRIM_CALL = re.compile(r"\|\s*trim\((?:'[^']*'|\"[^\"]*\")\)")


def strip_arguments_dropped() -> None:
    """Rewrites ``.strip('\\n')`` to ``.strip()`` (and ``trim('x')`` to ``trim``) in every
    template before compiling it."""
    compile_template = template.compile_template

    def rewriting(source):
        return compile_template(_TRIM_CALL.sub("| trim", _STRIP_CALL.sub(r".\1strip()", source)))

    template.compile_template = rewriting


def generation_prompt_ignored() -> None:
    render = template.ChatTemplate.render
    template.ChatTemplate.render = lambda self, messages, add_generation_prompt=False, **kw: render(
        self, messages, False, **kw
    )


def first_system(change) -> None:
    """Where a conversation without tools has no system message first, ``change`` renders it."""
    render = template.ChatTemplate.render

    def rendering(self, messages, add_generation_prompt=False, **kw):
        if kw.get("tools") or not messages or messages[0].get("role") == "system":
            return render(self, messages, add_generation_prompt, **kw)
        return change(lambda ms: render(self, ms, add_generation_prompt, **kw), messages)

    template.ChatTemplate.render = rendering


def without_default_system(render, messages):
    """A placeholder system message rendered, then its block cut out."""
    out = render([{"role": "system", "content": "\x01"}, *messages])
    block = "<|im_start|>system\n\x01<|im_end|>\n"
    return out.replace(block, "", 1)


def reasoning_trimmed() -> None:
    prepare = template.prepare_messages

    def stripping(messages):
        return [
            {k: v.strip() if k in ("reasoning_content", "thinking", "reasoning") and isinstance(v, str) else v
             for k, v in m.items()}
            for m in prepare(messages)
        ]  # fmt: skip

    template.prepare_messages = stripping


DEFECTS = {
    "tojson_html": lambda: wrap_tojson(html_tojson),
    "tojson_ascii": lambda: wrap_tojson(ascii_tojson),
    "untrimmed": lambda: environment_settings(trim_blocks=False, lstrip_blocks=False),
    "lstrip_off": lambda: environment_settings(lstrip_blocks=False),  # a look-alike of untrimmed
    "js_booleans": js_booleans,
    "strip_args": strip_arguments_dropped,
    "no_gen": generation_prompt_ignored,
    "reasoning_strip": reasoning_trimmed,
    "no_default_system": lambda: first_system(without_default_system),
    # a look-alike of no_default_system: an empty system message in its place
    "empty_system": lambda: first_system(lambda render, ms: render([{"role": "system", "content": ""}, *ms])),
}

if __name__ == "__main__":
    sys.exit(serve_with_defects(DEFECTS))

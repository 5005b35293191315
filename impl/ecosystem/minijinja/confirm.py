"""Hand reproductions of minijinja divergences the specgate gates found, with
minijinja's own public API only (no specgate). Prints one line per divergence; exit 0
when every one still reproduces, 1 when one no longer does.

The environment is the one the adapter builds: `trim_blocks`, `lstrip_blocks` and
`pycompat` (Python string methods), minijinja's own filters.

    python impl/ecosystem/minijinja/confirm.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import minijinja

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import report

# (what, template, context, the reference's output). Every reference output is what
# transformers 5.24.0 renders: `_compile_jinja_template(template).render(**context)`
# (jinja2 3.1.6, its ImmutableSandboxedEnvironment and its plain-json.dumps tojson).
DIVERGENCES = [
    (
        "tojson HTML-escapes < > & ' as \\u003c… (transformers' tojson is plain json.dumps)",
        "{{ x | tojson }}",
        {"x": {"name": "<b>&'", "n": 1}},
        '{"name": "<b>&\'", "n": 1}',
    ),
    (
        "str.title() after an apostrophe and a digit (Python capitalizes It'S, 2Nd)",
        "{{ s.title() }}",
        {"s": "it's o'neil 2nd"},
        "It'S O'Neil 2Nd",
    ),
    (
        "str.title() of the digraph ǆ gives the uppercase Ǆ, not the titlecase ǅ",
        "{{ s.title() }}",
        {"s": "ǆemal σας"},
        "ǅemal Σας",
    ),
    (
        "the e filter escapes ' as &#x27; and / as &#x2f; (jinja2/markupsafe: &#39;, / kept)",
        "{{ s | e }}",
        {"s": "<a href='x'>&</a>"},
        "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;",
    ),
    (
        "loop.last is never true in a loop over the characters of astral-plane text "
        "(construct 66_astral_loop_over_characters)",
        "{% for c in s %}{{ loop.index0 }}={{ c }}{% if loop.last %}/{{ loop.length }}{% else %},{% endif %}"
        "{% endfor %}",
        {"s": "a😀𝐀𠀀b🇯🇵"},
        # snapshots/constructs/render_template.json, 66_astral_loop_over_characters (its loop part)
        "0=a,1=😀,2=𝐀,3=𠀀,4=b,5=🇯,6=🇵/7",
    ),
]


def rendered(env: minijinja.Environment, template: str, context: dict) -> str:
    """minijinja's output, or its error's first line."""
    try:
        return env.render_str(template, **context)
    except minijinja.TemplateError as exc:
        return f"TemplateError: {str(exc).splitlines()[0]}"


def main() -> int:
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True)
    rows = (
        (what, rendered(env, template, context), reference)
        for what, template, context, reference in DIVERGENCES
    )
    return report(rows, "minijinja", "transformers")


if __name__ == "__main__":
    sys.exit(main())

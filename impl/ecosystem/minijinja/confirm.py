"""Hand reproductions of minijinja divergences the specgate gates found, with
minijinja's own public API only (no specgate). Prints one line per divergence; exit 0
when every one still reproduces, 1 when one no longer does.

The environment is the one the adapter builds: `trim_blocks`, `lstrip_blocks` and
`pycompat` (Python string methods), minijinja's own filters.

    python impl/ecosystem/minijinja/confirm.py
"""

from __future__ import annotations

import sys

import minijinja

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
]


def main() -> int:
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True)
    still = True
    for what, template, context, reference in DIVERGENCES:
        try:
            engine = env.render_str(template, **context)
        except minijinja.TemplateError as exc:
            engine = f"TemplateError: {str(exc).splitlines()[0]}"
        reproduces = engine != reference
        still &= reproduces
        verdict = "REPRODUCES" if reproduces else "GONE"
        print(f"{verdict}: {what}: minijinja {engine!r} vs transformers {reference!r}")
    return 0 if still else 1


if __name__ == "__main__":
    sys.exit(main())

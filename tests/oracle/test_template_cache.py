"""The oracle's compiled-template cache is bounded: the differential search feeds it
generated templates without end, and a run must not grow with them."""

from __future__ import annotations

from oracle import template


def test_compile_cache_keeps_only_the_most_recent_templates() -> None:
    template._compiled.clear()
    sources = [f"{{{{ messages[0].content }}}} #{i}" for i in range(template.COMPILED_LIMIT + 50)]
    compiled = [template.compile_template(s) for s in sources]
    assert len(template._compiled) == template.COMPILED_LIMIT
    # the newest are served from the cache, the oldest compiled again
    assert template.compile_template(sources[-1]) is compiled[-1]
    assert template.compile_template(sources[0]) is not compiled[0]
    assert template.compile_template(sources[0]).render(messages=[{"content": "x"}]) == "x #0"
    assert len(template._compiled) == template.COMPILED_LIMIT


def test_a_cache_hit_is_the_most_recently_used() -> None:
    template._compiled.clear()
    first = template.compile_template("{{ 1 }}")
    for i in range(template.COMPILED_LIMIT - 1):
        template.compile_template(f"{{{{ {i + 2} }}}}")
        template.compile_template("{{ 1 }}")  # touched again: never the oldest
    template.compile_template("{{ 'one more' }}")
    assert template.compile_template("{{ 1 }}") is first

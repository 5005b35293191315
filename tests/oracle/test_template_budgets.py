"""Each render budget exists and fires: steps, output, memory, time.

The hostile corpus is judged by its bounds, whichever budget stops a template first
(test_template.py in process; test_template_hostile_bounds.py with the clock out of
reach, per template in a fresh interpreter). Here each budget is shown on its own: a
template sized so that the budget fires after a few milliseconds of work on any machine,
with every other budget out of reach — so the verdict does not depend on the machine's
speed or load. The refusal must name the budget, the construct it stopped and the line.
"""

from __future__ import annotations

import dataclasses

import pytest

from oracle import template as tpl
from oracle.template_bounds import CHARS_PER_STEP, MACRO_CALL_STEPS
from oracle.template_sandbox import DEFAULT_LIMITS

# No budget but the one under test can fire: per-message allowances off, the others far
# out of reach of a budget that works (each test's budget fires within milliseconds of
# work; 50 M steps are ~20 s of CPU here) — and a backstop, should the one tested be broken.
OUT_OF_REACH = dataclasses.replace(
    DEFAULT_LIMITS,
    max_steps=50_000_000,
    steps_per_message=0,
    max_seconds=60.0,
    seconds_per_message=0.0,
    max_memory_bytes=1 << 40,
)
NESTED_LOOPS = "x\n{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
EXPONENTIAL_MACRO = (
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}\n{{ f(60) }}"
)
# 64 strings of 1 MB held at once: 64 MB if nothing stops it (a broken budget renders).
HELD_STRINGS = (
    "{% set ns = namespace(l=[]) %}\n"
    "{% for i in range(64) %}{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}{{ ns.l | length }}"
)

# Each: (template, the budget, what it must say, the construct, the template line).
BUDGETS = {
    "steps: loop iterations": (
        NESTED_LOOPS,
        {"max_steps": 10_000},
        "render step budget exceeded (10,000 steps)",
        "for loop",
        2,
    ),
    "steps: macro calls": (
        EXPONENTIAL_MACRO,
        {"max_steps": 10_000},
        "render step budget exceeded (10,000 steps)",
        "call 'f'",
        1,
    ),
    "output": (
        "a\n{% for i in range(1000) %}{{ 'y' * 100 }}{% endfor %}",
        {"max_chars": 10_000},
        "rendered output exceeds 10,000 characters",
        "output",
        2,
    ),
    "memory": (
        HELD_STRINGS,
        {"max_memory_bytes": 16 << 20},
        "render memory budget exceeded (memory grew by more than 16 MB)",
        "operator '*'",
        2,
    ),
    "time": (NESTED_LOOPS, {"max_seconds": 0.05}, "render time budget exceeded (0.05 s)", "for loop", 2),
}


@pytest.mark.parametrize("budget", sorted(BUDGETS))
def test_each_render_budget_fires_on_its_own(budget):
    source, limits, says, construct, line = BUDGETS[budget]
    with pytest.raises(tpl.TemplateRefusal) as info:
        tpl.ChatTemplate(source, limits=dataclasses.replace(OUT_OF_REACH, **limits))
    message = str(info.value)
    assert says in message and info.value.construct == construct, message
    assert info.value.line == line and f"template line {line}" in message, message


def steps_of(source: str, context: dict) -> int:
    """The steps one render of ``source`` counts: the smallest step budget it renders within."""
    low, high = 0, 1 << 20
    while low < high:
        middle = (low + high) // 2
        try:
            tpl.render_template(source, context, dataclasses.replace(OUT_OF_REACH, max_steps=middle))
            high = middle
        except tpl.TemplateRefusal as exc:
            assert "render step budget exceeded" in str(exc), exc
            low = middle + 1
    return low


def test_steps_count_work_not_calls():
    """A macro call counts as much as ~30 loop iterations, and an operation on a long
    string a step per ``CHARS_PER_STEP`` characters it reads or builds: the step budget
    bounds CPU time, whatever the steps are spent on (29 s of CPU once went into two
    million macro calls)."""
    call = steps_of("{% macro f() %}{% endmacro %}{{ f() }}", {})
    assert call == MACRO_CALL_STEPS
    small = steps_of("{{ s | upper }}", {"s": "x"})
    big = steps_of("{{ s | upper }}", {"s": "x" * (64 * CHARS_PER_STEP)})
    assert big - small == 2 * 64  # 64 steps for reading the input, 64 for building the result

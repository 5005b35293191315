"""The checks of the oracle's template refusals, shared by ``test_template.py`` (the
real renderer passes them) and ``test_template_mutations.py`` (each catches a planted
defect)."""

from __future__ import annotations

import time

from oracle import template as tpl
from specgate.upkeep import corpus
from tests.oracle import hostile_probe

HOSTILE = corpus.hostile_templates()
# In process, only that nothing hangs, in CPU seconds (the work done, not the machine's
# load): the slowest template here took 2.6 s inside the full suite, so 20 s holds on a
# machine 3x slower with a margin of 2.5. The 2 s bound: test_template_hostile_bounds.py.
HANG_SECONDS = 20.0


def hostile_problem(source: str, expect: str) -> str | None:
    """None when the oracle refuses ``source`` within the hang bound, naming a template
    line, and either naming ``expect`` or refused by a render budget; else what went
    wrong.

    The bound is judged, not which budget fired: the render's time budget is wall-clock,
    so on a slow or busy machine it may fire before the budget a template is meant to
    hit (steps, output, memory) — a refusal all the same. That every hostile template
    reaches its own budget with the clock out of reach, in bounded CPU, is measured per
    template in a fresh interpreter (test_template_hostile_bounds.py, which also holds
    the 2 s CPU and the memory bounds: inside the full suite this process holds
    gigabytes of references); that each budget exists and fires, on templates sized to
    reach it at once, is test_template_budgets.py."""
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        tpl.ChatTemplate(source)  # compile + canary render: where a model's template first runs
    except tpl.TemplateRefusal as exc:
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if cpu > HANG_SECONDS:  # work done: a template cannot wait, so a hang burns CPU
            return f"refused only after {elapsed:.2f} s ({cpu:.2f} s of CPU; hang bound {HANG_SECONDS} s)"
        if not hostile_probe.refused_as_expected(str(exc), expect):
            return f"refusal names neither {expect!r} nor a render budget: {exc}"
        if exc.line is None or f"template line {exc.line}" not in str(exc):
            return f"refusal does not name the template line: {exc}"
        return None
    except Exception as exc:  # anything but a refusal is a crash of the renderer
        return f"raised {type(exc).__name__} instead of a refusal: {exc}"
    return f"NOT refused (rendered in {time.perf_counter() - start:.2f} s)"


# Each: (template, construct the refusal must name, template line it must name).
REFUSALS = {
    "unknown filter": (
        "{% for m in messages %}\n{{ m.content }}\n{{ m.content | splitlines }}\n{% endfor %}",
        "filter 'splitlines'",
        3,
    ),
    "unknown test": ("line one\n{% if messages is conversation %}x{% endif %}", "test 'conversation'", 2),
    "unknown tag": ("a\nb\n{% generate %}x{% endgenerate %}", "tag 'generate'", 3),
    "unknown method": (
        "{{ bos_token }}\n{% for m in messages %}{{ m.content.removeprefix_all('x') }}{% endfor %}",
        "attribute 'removeprefix_all'",
        2,
    ),
    "undefined variable call": ("x\ny\n{{ render_tools(tools) }}", "variable 'render_tools'", 3),
    "raise_exception": (
        "{% if messages[0].role == 'user' %}\n{{ raise_exception('System message required') }}\n{% endif %}",
        "System message required",
        2,
    ),
    "type error": ("\n\n\n{{ messages[0].content + 1 }}", "TypeError", 4),
    "syntax error": ("{% for m in messages %}\n{{ m.content }\n{% endfor %}", "syntax", 2),
    "mutation": ("ok\n{{ messages.pop() }}", "attribute 'pop'", 2),
}


def refusal_problem(source: str, construct: str, line: int) -> str | None:
    """None when loading ``source`` is refused with a message naming ``construct``
    and ``template line <line>``; else what is missing."""
    try:
        tpl.ChatTemplate(source)
    except tpl.TemplateRefusal as exc:
        message = str(exc)
        missing = [
            what
            for what, text in (("construct", construct), ("line", f"template line {line}"))
            if text not in message
        ]
        return f"refusal message lacks the {' and the '.join(missing)}: {message}" if missing else None
    return "not refused"

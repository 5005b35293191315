"""The checks of the oracle's template refusals, shared by ``test_template.py`` (the
real renderer passes them) and ``test_template_mutations.py`` (each catches a planted
defect)."""

from __future__ import annotations

import dataclasses
import time

from oracle import template as tpl
from oracle.template_sandbox import DEFAULT_LIMITS, Limits
from specgate.upkeep import corpus
from tests.oracle import hostile_probe

HOSTILE = corpus.hostile_templates()
HANG_SECONDS = 20.0  # in process: nothing hangs (the 1 s bounds: test_template_hostile_bounds.py)


def hostile_problem(source: str, expect: str) -> str | None:
    """None when the oracle refuses ``source`` with a message containing ``expect`` and
    a template line, within the hang bound; else what went wrong. The one-second CPU
    and wall bounds and the memory bound are measured per template in a fresh
    interpreter (test_template_hostile_bounds.py): inside the full suite this process
    holds gigabytes of references, and one template (48_slice_huge) measured 2.6 s of
    CPU here while it takes 0.16 s in a fresh process.

    The render time budget is wall-clock, so on a busy machine it can fire before the
    budget a template is meant to hit (output, memory): such a refusal is judged again
    with the time budget at ``RETRY_SECONDS`` — out of reach of a budget that works,
    still a bound for one that does not."""
    problem, exc = _refused(source, expect, DEFAULT_LIMITS)
    if exc is not None and TIME_BUDGET in str(exc) and TIME_BUDGET not in expect:
        problem, _ = _refused(source, expect, dataclasses.replace(DEFAULT_LIMITS, max_seconds=RETRY_SECONDS))
    return problem


TIME_BUDGET = "render time budget exceeded"
RETRY_SECONDS = 60.0


def _refused(source: str, expect: str, limits: Limits) -> tuple[str | None, Exception | None]:
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        tpl.ChatTemplate(
            source, limits=limits
        )  # compile + canary render: where a model's template first runs
    except tpl.TemplateRefusal as exc:
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if cpu > HANG_SECONDS or elapsed > HANG_SECONDS + limits.max_seconds:
            return (
                f"refused only after {elapsed:.2f} s ({cpu:.2f} s of CPU; hang bound {HANG_SECONDS} s)",
                exc,
            )
        if not hostile_probe.names_expected(str(exc), expect):
            return f"refusal does not name {expect!r}: {exc}", exc
        if exc.line is None or f"template line {exc.line}" not in str(exc):
            return f"refusal does not name the template line: {exc}", exc
        return None, exc
    except Exception as exc:  # anything but a refusal is a crash of the renderer
        return f"raised {type(exc).__name__} instead of a refusal: {exc}", None
    return f"NOT refused (rendered in {time.perf_counter() - start:.2f} s)", None


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

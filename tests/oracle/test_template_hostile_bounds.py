"""Every hostile template is refused fast and small: under 2 s of CPU and 256 MB, compile included.

Each template of ``corpus/templates/hostile/`` is loaded as a model's template
(compile + canary render) in its own forked child of a fresh interpreter
(``hostile_probe``), which reports the CPU time the refusal cost and its peak
resident memory above where it started — the kernel's high-water mark, which sees
the C allocations a hostile template aims for. A child still running after
``HANG_SECONDS`` is killed and reported as hung, so a regression costs seconds, not
the machine.

The corpus is probed with the render's time budget out of reach (``NO_CLOCK``): the
time budget is wall-clock, so which budget fires first would depend on the machine's
speed and load. Without it, every template must be stopped by the budget its
``{#- expect: … -#}`` line names — steps, output, memory, a size or a security rule,
all counted in work, not seconds — and the refusal must name the template line. With
the clock (the default) a template can only be stopped sooner, so the bounds measured
here are the bounds of the default configuration on any machine. The bounds asserted
are ones that hold however busy the machine: CPU time (the work done, whatever the
neighbours do) and peak memory; the wall clock only as the kill after ``HANG_SECONDS``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jinja2.parser import Parser

from oracle import template as tpl
from oracle.gguf import open_gguf
from oracle.template_sandbox import DEFAULT_LIMITS, Limits, TemplateSandbox
from specgate.supply.models import model_ref
from specgate.upkeep import corpus
from tests.oracle import hostile_probe

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")

# The CPU bound of one refusal (the bound promised for hostile templates: 2 s, 512 MB).
# With the clock out of reach the slowest corpus templates cost 0.25-0.38 s of CPU here
# (the walks of doubled namespaces at the item bound; 12_nested_loops and
# 17_exponential_macro at the step budget), so on a machine 3x slower they stay under
# 1.2 s: a margin of 5 on this machine. CPU time does not grow with the machine's load.
REFUSAL_SECONDS = 2.0
PEAK_MB = 256
# A wall-clock kill, only for a hang: at load 43 on 2 cores a template's 1 s of CPU is
# ~20 s of wall time, so the kill sits far above (20 s was once the value).
HANG_SECONDS = 120.0
# The render time budget (wall clock) out of reach: every template is then stopped by a
# budget counted in work, the same on every machine.
NO_CLOCK = ("--max-seconds", "3600")
# A child's address space is capped, so that a regression raises MemoryError in it
# instead of taking gigabytes from the machine (far above the 256 MB bound).
ADDRESS_SPACE_CAP_MB = 2048
ROOT = Path(__file__).resolve().parents[2]
HOSTILE = corpus.hostile_templates()


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    """Each hostile template's outcome, CPU time and peak memory without the clock,
    measured once per run."""
    return probe_all(sorted(corpus.HOSTILE.glob("*.jinja")), *NO_CLOCK)


def probe_all(paths: list[Path], *extra: str) -> dict[str, dict]:
    command = [
        sys.executable,
        "-m",
        "tests.oracle.hostile_probe",
        "--timeout",
        str(HANG_SECONDS),
        "--memory-cap-mb",
        str(ADDRESS_SPACE_CAP_MB),
        *extra,
        *map(str, paths),
    ]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_SECONDS * len(paths) + 60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = {row["name"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert set(results) == {p.stem for p in paths}, "the probe did not report every hostile template"
    return results


def bound_problems(result: dict, expect: str, *, any_budget: bool = False) -> list[str]:
    """What is wrong with one probed hostile template (empty: refused fast and small,
    naming ``expect`` — or, with ``any_budget``, by whichever render budget fired first)."""
    if result["outcome"] != "refused":
        return [f"{result['outcome']}: {result.get('message', '')}"]
    problems = []
    message = result["message"]
    named = hostile_probe.refused_as_expected if any_budget else hostile_probe.names_expected
    if not named(message, expect):
        problems.append(f"the refusal does not name {expect!r}: {message}")
    if result["line"] is None or f"template line {result['line']}" not in message:
        problems.append(f"the refusal does not name the template line: {message}")
    if result["cpu_seconds"] >= REFUSAL_SECONDS:
        problems.append(
            f"refused only after {result['cpu_seconds']:.2f} s of CPU (bound {REFUSAL_SECONDS} s)"
        )
    if result["peak_mb"] >= PEAK_MB:
        problems.append(f"peak memory {result['peak_mb']:.0f} MB (bound {PEAK_MB} MB)")
    return problems


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_refused_fast_and_small(probed, name):
    problems = bound_problems(probed[name], HOSTILE[name][1])
    assert not problems, f"hostile template {name}: " + "; ".join(problems)


def test_the_corpus_covers_every_class_of_the_red_team():
    """The classes the sandbox was once open to stay in the corpus (one file each at least)."""
    classes = {
        "nested object printed": (
            "nested_namespace_print",
            "nested_namespace_string",
            "nested_namespace_pprint",
        ),
        "nested object through ~": ("nested_namespace_tilde",),
        "string-valued sizes": ("tojson_indent_string", "tojson_separators", "indent_string_width"),
        "more string-valued sizes": ("wordwrap_wrapstring", "strftime_width"),
        "format widths from arguments": ("format_nested_width", "percent_mapping_width"),
        "lazy item floods": ("slice_huge", "batch_huge"),
        "compile-time failures": ("nested_for", "parentheses", "nested_if", "nested_generation"),
        "template size": ("oversize_template",),
        "internals printed": ("cycler_string", "joiner_print", "function_print", "method_print"),
        "deep comparison and hashing": ("deep_compare", "deep_hash_dict_key", "deep_sort"),
        "memory held across steps": ("many_big_strings",),
    }
    stems = {name.split("_", 1)[1] for name in HOSTILE}
    missing = [case for cases in classes.values() for case in cases if case not in stems]
    assert not missing, f"hostile corpus lacks {missing}"


@pytest.mark.parametrize("stem", ["many_big_strings", "exponential_macro"])
def test_a_template_stopped_by_the_clock_is_within_its_bound(stem):
    """CI's red runs, made deterministic: on a busy (or slower) machine the wall-clock time
    budget fired before the memory budget for 50_many_big_strings and before the step
    budget for 17_exponential_macro. Here the time budget is made to fire first; the
    refusal is within the template's bounds all the same (refused, its line, CPU, peak)."""
    name = next(n for n in HOSTILE if n.endswith(stem))
    source, expect = HOSTILE[name]
    clocked = fresh_probe(source, HANG_SECONDS, {"max_seconds": 0.001})
    assert clocked["outcome"] == "refused" and "render time budget exceeded" in clocked["message"], clocked
    assert "render time budget" not in expect and bound_problems(clocked, expect, any_budget=True) == [], (
        clocked
    )


def test_the_probe_sees_memory_and_hangs():
    """The measurement itself: a template that allocates 300 MB and renders is reported
    with its peak, and one that outlives the timeout is reported as hung — so a
    passing bound above is a measured one."""
    # 120 s: only a hang guard for a render that takes ~1 s quiet (10 s was hit at load 43)
    # (steps too: building and reading 300 MB counts ~600k steps of work)
    roomy = {"max_chars": 400_000_000, "max_memory_bytes": 1 << 40, "max_seconds": 120.0, "max_steps": 10**9}
    big = fresh_probe("{% set s = 'x' * 300000000 %}{{ s | length }}", 120.0, roomy)
    assert big["outcome"] == "rendered" and big["peak_mb"] > 250, big
    slow = {"max_seconds": 30.0, "max_steps": 10**9}
    hung = fresh_probe(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", 1.0, slow
    )
    assert hung["outcome"] == "hung", hung


def fresh_probe(source: str, timeout: float, limits: dict) -> dict:
    """``hostile_probe.probe`` run from a fresh interpreter, as the corpus is probed: a
    child forked from this (possibly large) pytest process would reuse memory its
    parent freed but kept, and show a 300 MB allocation as almost nothing."""
    code = (
        "import json, sys\n"
        "from oracle.template_sandbox import Limits\n"
        "from tests.oracle import hostile_probe\n"
        "source, timeout, limits = json.loads(sys.argv[1])\n"
        "print(json.dumps(hostile_probe.probe(source, timeout, limits=Limits(**limits))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps([source, timeout, limits])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# the source bounds sit far above every real template


MARGINS = {"max_template_tokens": 4, "max_block_depth": 2, "max_bracket_depth": 4, "max_tree_depth": 2}


@pytest.mark.parametrize("model_id", corpus.TEMPLATE_MODELS)
def test_real_templates_are_far_inside_the_source_bounds(model_id):
    """Each published template passes the source checks with every bound divided by its margin."""
    from oracle.template_bounds import check_template_source, check_tree_depth

    model = model_ref(model_id)
    source = tpl.chat_template_for(
        open_gguf(model.gguf, header_only=True).metadata, model.tokenizer_config
    ).source
    tight = Limits(**{name: getattr(DEFAULT_LIMITS, name) // margin for name, margin in MARGINS.items()})
    env = TemplateSandbox()
    check_template_source(env, source, tight)
    check_tree_depth(Parser(env, source).parse(), tight)  # as parsed, before the guards are added
    assert len(source) * 16 < DEFAULT_LIMITS.max_template_chars

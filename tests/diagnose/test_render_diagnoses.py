"""Every render diagnosis of the catalogue names its planted bug, and a look-alike is
not diagnosed as it.

Each engine is ``tests/engines/fixable_template.py`` with one or two classic chat-template
bugs planted (written there independently of the catalogue), served as a real ``cmd:``
process and gated on the render stage of qwen3-vocab (its conversations and the construct
templates); the report's groups must carry the expected diagnoses and none of the
forbidden ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.diagnose.render import CATALOGUE
from tests.diagnose.planted import assert_diagnosed, assert_evidence_explains, diagnosed

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fixable_template.py"
MODEL = "qwen3-vocab"
CAUSE = {h.name: h.cause for h in CATALOGUE}

pytestmark = pytest.mark.slow

#: planted defects, the diagnoses that must name them, the ones that must not appear (and the
#: template model gated, qwen3-vocab unless given: Qwen3's template has no default system prompt)
PLANTED = [
    ("tojson_html,no_gen", {"tojson_html_escaped", "no_generation_prompt"}, {"tojson_ascii"}),
    ("tojson_ascii,js_booleans", {"tojson_ascii", "js_booleans"}, {"tojson_html_escaped"}),
    ("untrimmed", {"blocks_untrimmed"}, set()),
    # the look-alike: only lstrip_blocks off (beside a bug that must still be named)
    ("lstrip_off,no_gen", {"no_generation_prompt"}, {"blocks_untrimmed"}),
    ("strip_args", {"strip_args_ignored"}, {"reasoning_stripped"}),
    ("reasoning_strip", {"reasoning_stripped"}, {"strip_args_ignored"}),
    ("no_default_system", {"no_default_system"}, set(), "qwen2.5-coder-0.5b-instruct"),
    # the look-alike: an empty system message where the default one belongs (beside a bug of
    # the construct templates: a defect meeting it in one case would rightly not be diagnosed)
    ("empty_system,js_booleans", {"js_booleans"}, {"no_default_system"}, "qwen2.5-coder-0.5b-instruct"),
]


def test_every_render_hypothesis_of_the_catalogue_is_planted_here() -> None:
    assert {name for _, named, *_ in PLANTED for name in named} == set(CAUSE)


@pytest.mark.parametrize(
    ("defects", "named", "not_named", "model"),
    [(*p, MODEL)[:4] for p in PLANTED],
    ids=[p[0] for p in PLANTED],
)
def test_a_planted_render_bug_is_diagnosed_by_name(
    tmp_path: Path, defects: str, named: set[str], not_named: set[str], model: str
) -> None:
    run, found = diagnosed(tmp_path, ENGINE, defects, "render", model, CAUSE)
    groups = assert_diagnosed(run, found, named, not_named, defects)
    assert_evidence_explains(
        groups, " equal the oracle's rendering (which agrees with transformers) when it "
    )

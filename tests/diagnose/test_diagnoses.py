"""Every diagnosis of the catalogue names its planted bug, and a look-alike is not
diagnosed as it.

Each engine is ``tests/engines/fixable_tokenizer.py`` with one or two classic bugs
planted (written there independently of the catalogue), served as a real ``cmd:``
process and gated on qwen3-vocab; the report's groups must carry the expected
diagnoses and none of the forbidden ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.diagnose.tokenizer import CATALOGUE
from tests.diagnose.planted import assert_diagnosed, assert_evidence_explains, diagnosed

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fixable_tokenizer.py"
MODEL = "qwen3-vocab"
CAUSE = {h.name: h.cause for h in CATALOGUE}

pytestmark = pytest.mark.slow

#: planted defects, stages gated, the diagnoses that must name them, the ones that must not
#: appear. A tokenizer defect and a decode defect share a run: they cannot meet in one case.
PLANTED = [
    ("nfc,fffd", "split,encode,decode", {"nfc", "utf8_replacement"}, {"nfkc"}),
    ("nfkc,unused_text", "split,encode,decode", {"nfkc", "unused_as_text"}, {"nfc"}),
    ("lookahead,control_dropped", "split,encode,decode", {"whitespace_run_whole", "control_omitted"}, set()),
    ("digits3", "split,encode", {"digits_in_threes"}, set()),
    ("digits2", "split,encode", set(), {"digits_in_threes"}),  # the look-alike: pairs, not threes
    ("specials_in_plain", "encode", {"specials_in_plain_text"}, {"specials_not_parsed"}),
    ("specials_ignored", "encode", {"specials_not_parsed"}, {"specials_in_plain_text"}),
    ("bos", "encode", {"bos_added"}, {"eos_added"}),
    ("bos_when_parsing", "encode", set(), {"bos_added"}),  # the look-alike: a BOS in one mode only
    ("eos", "encode", {"eos_added"}, {"bos_added"}),
    ("nfc,lookahead", "split,encode", {"nfc", "whitespace_run_whole"}, {"nfkc"}),  # two bugs in one stage
]


def test_every_hypothesis_of_the_catalogue_is_planted_here() -> None:
    assert {name for _, _, named, _ in PLANTED for name in named} == set(CAUSE)


@pytest.mark.parametrize(("defects", "stages", "named", "not_named"), PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_bug_is_diagnosed_by_name(
    tmp_path: Path, defects: str, stages: str, named: set[str], not_named: set[str]
) -> None:
    run, found = diagnosed(tmp_path, ENGINE, defects, stages, MODEL, CAUSE)
    groups = assert_diagnosed(run, found, named, not_named, defects)
    assert_evidence_explains(groups, " equal the GGUF pipeline's answer")

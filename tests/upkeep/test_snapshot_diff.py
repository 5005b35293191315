"""The regeneration report (``specgate.upkeep.snapshot_diff``): two small snapshot
directories written to disk, one with planted changes, compared and reported."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from specgate.upkeep import snapshot_diff

OLD = {
    "provenance": {
        "model": "tiny",
        "model_sha256": "aa" * 32,
        "packages": {"llama-cpp-python": "0.3.36", "transformers": "5.24.0"},
        "lock": {"file": "constraints/references.txt", "sha256": "11" * 32},
        "date": "2026-11-29",
        "command": "pytest tests/references --record-references",
    },
    "cases": {
        "hello": {"ids": [9707, 11, 1879], "text": "Hello, world"},
        "spaces": {"ids": [256, 256], "text": "    "},
        "gone": {"ids": [1], "text": "x"},
    },
}


def planted() -> dict:
    """OLD regenerated after a model update: one id changed, one case gone, one new,
    a new model sha256 and a newer transformers, on another date."""
    new = copy.deepcopy(OLD)
    new["cases"]["hello"]["ids"][1] = 12
    del new["cases"]["gone"]
    new["cases"]["emoji"] = {"ids": [145, 113], "text": "🙂"}
    new["provenance"].update(model_sha256="bb" * 32, date="2026-11-30", command="pytest other")
    new["provenance"]["packages"]["transformers"] = "5.25.0"
    return new


def write(root: Path, model: str, stage: str, data: dict) -> None:
    (root / model).mkdir(parents=True, exist_ok=True)
    (root / model / f"{stage}.json").write_text(json.dumps(data), encoding="utf-8")


def test_diff_reports_added_removed_changed_and_provenance(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    write(before, "tiny", "encode", OLD)
    write(after, "tiny", "encode", planted())
    write(before, "tiny", "decode", OLD)
    write(after, "tiny", "decode", OLD)  # untouched
    write(after, "tiny", "logits", OLD)  # a stage recorded for the first time

    diffs = {d.stage: d for d in snapshot_diff.diff_dirs(before, after)}

    encode = diffs["encode"]
    assert encode.added == ["emoji"]
    assert encode.removed == ["gone"]
    assert list(encode.changed) == ["hello"]
    assert encode.changed["hello"] == "at ['ids'][1]: 11 -> 12"
    assert encode.provenance == {
        "model_sha256": ("aa" * 32, "bb" * 32),
        "packages.transformers": ("5.24.0", "5.25.0"),
    }
    assert diffs["decode"].status == "unchanged"
    assert diffs["logits"].status == "new file"

    report = snapshot_diff.render(list(diffs.values()), None)
    assert "### tiny / encode — changed" in report
    assert "`hello`: at ['ids'][1]: 11 -> 12" in report
    assert '`packages.transformers`: `"5.24.0"` -> `"5.25.0"`' in report
    assert "tiny / decode" not in report


def test_first_divergence_of_strings_and_lists():
    assert snapshot_diff.first_divergence_of_values({"p": "a b c"}, {"p": "a b c"}) is None
    why = snapshot_diff.first_divergence_of_values(
        {"prompt": "<|im_start|>user\nhi"}, {"prompt": "<|im_start|>user hi"}
    )
    assert why.startswith("at ['prompt'], character 16:")
    assert snapshot_diff.first_divergence_of_values([1, 2], [1, 2, 3]) == (
        "at [2]: lengths 2 -> 3; first extra (new) 3"
    )
    assert snapshot_diff.first_divergence_of_values({"a": 1}, {"b": 1}).endswith("key removed (was 1)")


def test_oracle_recheck_verdict_from_junit(tmp_path):
    junit = tmp_path / "gates.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="specgate.gates.test_tokenizer" name="test_encode[tiny/hello]"/>'
        '<testcase classname="specgate.gates.test_tokenizer" name="test_encode[tiny/emoji]">'
        '<failure message="ids differ"/></testcase>'
        '<testcase classname="specgate.gates.test_tokenizer" name="test_split[tiny/x]"><skipped/></testcase>'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    check = snapshot_diff.gate_check(junit)
    assert (check.passed, check.skipped, check.failed) == (
        1,
        1,
        ["specgate.gates.test_tokenizer::test_encode[tiny/emoji]"],
    )
    assert "**The oracle no longer agrees**" in snapshot_diff.render([], check)
    assert "**The oracle re-check did not run**" in snapshot_diff.render(
        [], snapshot_diff.gate_check(tmp_path / "none")
    )


def test_cli_writes_the_report_and_refuses_a_malformed_snapshot(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    write(before, "tiny", "encode", OLD)
    write(after, "tiny", "encode", planted())
    out = tmp_path / "reports" / "snapshot-diff.md"
    assert snapshot_diff.main([str(before), str(after), "--out", str(out)]) == 0
    assert "- removed: 1 — gone" in out.read_text(encoding="utf-8")

    (after / "tiny" / "encode.json").write_text('{"provenance": {}}', encoding="utf-8")
    assert snapshot_diff.main([str(before), str(after), "--out", str(out)]) == 2
    assert "malformed snapshot" in capsys.readouterr().err

"""Records carry what they were gated on (issue 38): a run of a user's own GGUF with
``--snapshot-dir`` gates the cases of DIR, and its reports show, triage and replay those
same inputs — never the repository's ``snapshots/`` read again by the model's id.

A vocabulary model's file is copied to where a user's own file lives (``my-model.gguf``)
and its committed split snapshot to ``DIR/my-model/`` (recorded from exactly these bytes,
so it gates the copy; see ``tests/upkeep/test_own_gguf.py``). The engine is the case browser's
planted one (``tests/engines/browser_engine.py``: split fails on whitespace runs), so the
run has failing cases to triage as well as passing ones.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

from impl.process import lifeline
from specgate.outcomes.verdict import GateRecord
from specgate.plugin import model_missing
from specgate.run import wire
from specgate.supply import models as model_cache
from specgate.upkeep.snapshots import SNAPSHOT_ROOT
from tests.engines.parity_run import run_parity, script_impl

ROOT = Path(__file__).resolve().parents[2]
ENGINE = Path(__file__).resolve().parents[1] / "engines" / "browser_engine.py"
SOURCE = "qwen3-vocab"
KEEP = 24  # the snapshot's cases kept in DIR: a run of seconds
PLAIN = re.compile(r"[ -\[\]-~]+")  # printable ASCII without a backslash: shown exactly as it is


def test_a_snapshot_dir_run_browses_and_carries_the_inputs_it_gated(tmp_path: Path) -> None:
    if SOURCE not in model_cache.cached_models():
        model_missing(f"{SOURCE}; run: specgate models fetch {SOURCE}")
    gguf = tmp_path / "models" / "my-model.gguf"
    gguf.parent.mkdir()
    shutil.copyfile(model_cache.model_dir(SOURCE) / f"{SOURCE}.gguf", gguf)
    snaps = tmp_path / "snaps"
    (snaps / "my-model").mkdir(parents=True)
    snapshot = json.loads((SNAPSHOT_ROOT / SOURCE / "split.json").read_text("utf-8"))
    kept = sorted(snapshot["cases"])[:: max(1, len(snapshot["cases"]) // KEEP)]  # whitespace runs among them
    snapshot["cases"] = {k: snapshot["cases"][k] for k in kept}
    (snaps / "my-model" / "split.json").write_text(json.dumps(snapshot), "utf-8")
    assert not (SNAPSHOT_ROOT / "my-model").exists()
    texts = {k: c["text"] for k, c in snapshot["cases"].items()}

    run = run_parity(tmp_path, script_impl(ENGINE), "split", str(gguf), "--snapshot-dir", str(snaps))
    assert run.status == 1, run.output[-3000:]
    cases = run.report["cases"]
    assert cases and {c["model"] for c in cases} == {"my-model"}, run.output[-3000:]
    outcomes = {c["outcome"] for c in cases}
    assert {"pass", "fail"} <= outcomes, outcomes

    # every record says where its case was read from; a failing one carries its input
    assert {c["snapshot_root"] for c in cases} == {str(snaps.resolve())}
    failing = [c for c in cases if c["outcome"] == "fail"]
    assert all(c["input"] == {"text": texts[c["case"]]} for c in failing), failing[0]

    # the HTML case browser shows DIR's inputs, for passing and failing cases alike; and so
    # does the page `report merge` writes from the JSON report (the records carry their root)
    (json_report,) = (tmp_path / "reports").glob("parity-*.json")
    merged = tmp_path / "merged"
    command = [sys.executable, "-m", "specgate", "report", "merge", str(json_report), "--out", str(merged)]
    proc = lifeline.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, (
        proc.stdout[-2000:] + proc.stderr[-2000:]
    )  # the run failed, so does its merge
    pages = [*(tmp_path / "reports").glob("parity-*.html"), *merged.glob("parity-*.html")]
    assert len(pages) == 2, pages
    plain = [c for c in cases if PLAIN.fullmatch(texts[c["case"]])]
    assert plain, "no gated case has a plain-ASCII text to compare"
    for page in pages:
        data = re.search(
            r'<script type="application/json" id="case-data">(.*?)</script>', page.read_text("utf-8"), re.S
        )
        by_node = {row[3]: row for row in json.loads(data[1])}
        for c in plain:
            assert by_node[c["nodeid"]][5] == texts[c["case"]], (
                page.parent.name,
                c["nodeid"],
                by_node[c["nodeid"]][5],
            )
        assert all(by_node[c["nodeid"]][5] for c in cases), f"{page}: a case shown without its input"


def test_the_xdist_wire_carries_what_a_record_was_gated_on() -> None:
    """A worker's records reach the controller with their snapshot root and input."""
    sent = GateRecord(
        "split", "my-model", "fail", "t::test_split[my-model/a]", "m", {}, "a", {}, "/snaps", {"text": "a b"}
    )
    state = SimpleNamespace(records=[sent], engine_info=None, startup_failure="", setup_error="")
    channel: dict = {}
    wire.send(state, channel)
    controller = SimpleNamespace(records=[], engine_info=None, startup_failure="", setup_error="")
    wire.receive(controller, channel)
    (received,) = controller.records
    assert (received.snapshot_root, received.input) == ("/snaps", {"text": "a b"})

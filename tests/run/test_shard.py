"""``--shard I/N`` and ``specgate report merge``: a slow engine's parity run spread over
N CI jobs gives, merged, the report of one unsharded run.

The end-to-end test runs ``specgate/gates --models qwen3-vocab`` once whole and once in
3 shards (4 pytest processes, ~1 min) and compares the merged matrix with the whole
one; the others read only collections and the cost table.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from specgate import cli
from specgate.plugin import model_missing
from specgate.reports.parity_report import report_stem
from specgate.run import shard
from tests.child_pytest import run_pytest

VOCAB = "qwen3-vocab"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0/3", "between 1 and N"),
        ("4/3", "between 1 and N"),
        ("one/3", "expected I/N"),
        ("3", "expected I/N"),
    ],
)
def test_a_bad_shard_is_one_line(text, problem):
    with pytest.raises(shard.ShardError, match=problem):
        shard.parse_shard(text)


def test_a_bad_shard_stops_the_run_with_one_usage_line():
    proc = run_pytest(
        "specgate/gates/test_metadata.py", "--models", VOCAB, "--shard", "4/3", "--collect-only"
    )
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "--shard '4/3': I must be between 1 and N (got 4 of 3)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_groups_are_dealt_longest_first_to_the_lightest_shard():
    costs = {"a": 3.0, "b": 3.0, "c": 3.0, "d": 4.0, "e": 5.0}
    # By hand: e→1 (5|0), d→2 (5|4), a→2 (5|7), b→1 (8|7), c→2 (8|10): makespan 10.
    # Dealing in name order, alternately or to the lightest, would end at 11.
    expected = {"e": 1, "d": 2, "a": 2, "b": 1, "c": 2}
    for seed in range(5):  # the order the groups come in does not matter
        names = list(costs)
        random.Random(seed).shuffle(names)
        assert shard.deal({n: costs[n] for n in names}, 2) == expected


def test_unknown_stage_or_model_costs_the_stage_worst_else_the_default():
    costs = {"default_seconds": 1.5, "seconds_per_case": {"logits": {"a": 2.0, "b": 7.0}}}
    assert shard.case_cost(costs, "logits", "a") == 2.0
    assert shard.case_cost(costs, "logits", "user.gguf") == 7.0
    assert shard.case_cost(costs, "render", "a") == 1.5


def collected(*args: str) -> list[str]:
    proc = run_pytest("specgate/gates", "--collect-only", "-q", *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


#: Gate test functions whose name is not their stage's (``pytest.mark.gate``'s first argument).
GATE_STAGE_OF = {"template_ids": "template", "render_template": "render"}


def test_shards_partition_the_cases_and_keep_both_classes_of_a_case_together():
    model = "tiny-qwen2-f32"
    from specgate.supply import models

    if model not in models.cached_tiny_models():
        model_missing(f"{model} (run: specgate models tiny)")
    whole = collected("--models", model)
    parts = [collected("--models", model, "--shard", f"{i}/3") for i in (1, 2, 3)]
    assert sorted(c for part in parts for c in part) == sorted(whole), "every case in exactly one shard"
    assert all(parts), "no shard is empty"
    for part in parts:
        for nodeid in part:
            if nodeid.endswith("-exact]"):
                assert nodeid.removesuffix("-exact]") + "-quantized]" in part, nodeid
    # balanced by the measured costs: LPT leaves shards within one group's cost of each other
    costs = shard.load_costs()

    def cost(nodeid: str) -> float:
        stage = re.search(r"::test_(\w+)\[", nodeid)[1]
        if nodeid.endswith("-quantized]"):
            return 0.0  # its computation is paid by the exact case of the same shard
        # the gate's stage, as the shard split reads it from the gate marker (a test
        # function's name is not always its stage's: the construct templates are ``render``)
        return shard.case_cost(costs, GATE_STAGE_OF.get(stage, stage), model)

    loads = [sum(map(cost, part)) for part in parts]
    assert max(loads) - min(loads) <= max(map(cost, whole)), loads


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from specgate.supply import models

    if VOCAB not in models.cached_models():
        model_missing(f"{VOCAB} (run: specgate models fetch)")
    whole_dir, shard_dir = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("shards")
    proc = run_pytest("specgate/gates", "--models", VOCAB, "--report-dir", whole_dir)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for i in (1, 2, 3):
        proc = run_pytest("specgate/gates", "--models", VOCAB, "--shard", f"{i}/3", "--report-dir", shard_dir)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return whole_dir, shard_dir


@pytest.mark.slow  # three parity runs (two shards and the whole)
def test_merged_shards_equal_the_unsharded_run(runs, tmp_path, capsys):
    whole_dir, shard_dir = runs
    shard_files = sorted(shard_dir.glob("parity-*.json"))
    assert [p.name for p in shard_files] == [f"{report_stem('oracle', (i, 3))}.json" for i in (1, 2, 3)]
    assert cli.main(["report", "merge", *map(str, shard_files), "--out", str(tmp_path)]) == 0
    (whole,) = whole_dir.glob("parity-*.json")
    merged = tmp_path / f"{report_stem('oracle')}.json"
    want, got = (json.loads(p.read_text(encoding="utf-8")) for p in (whole, merged))
    counts = [{k: v for k, v in row.items() if k != "metrics"} for row in want["matrix"]]
    assert [{k: v for k, v in row.items() if k != "metrics"} for row in got["matrix"]] == counts
    assert got["coverage"] == want["coverage"] and got["verdict"] == want["verdict"]
    assert want["verdict"] == {"result": "pass", "reasons": [], "rules": []}
    assert sorted(c["nodeid"] for c in got["cases"]) == sorted(c["nodeid"] for c in want["cases"])
    shard_sizes = [len(json.loads(p.read_text(encoding="utf-8"))["cases"]) for p in shard_files]
    assert all(shard_sizes) and sum(shard_sizes) == len(want["cases"])
    assert (tmp_path / f"{report_stem('oracle')}.md").is_file()
    assert "coverage:" in capsys.readouterr().out


@pytest.mark.slow  # needs the three shard runs of the fixture
def test_an_incomplete_or_doubled_set_of_shards_is_one_line(runs, tmp_path, capsys):
    _, shard_dir = runs
    files = sorted(map(str, shard_dir.glob("parity-*.json")))
    assert cli.main(["report", "merge", files[0], files[2], "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "specgate: shards of 3: missing [2]"
    assert cli.main(["report", "merge", *files, files[1], "--out", str(tmp_path)]) == 2
    assert "given twice [2]" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(Path(files[1]).read_text()), "impl": "hf"}), encoding="utf-8")
    assert cli.main(["report", "merge", files[0], str(other), files[2], "--out", str(tmp_path)]) == 2
    assert "reports of different engines cannot be merged: hf, oracle" in capsys.readouterr().err
    assert not list(tmp_path.glob("parity-*")), "nothing is written from a bad set"


@pytest.mark.slow  # one more parity run, over two xdist workers
def test_a_run_over_xdist_workers_reports_what_one_process_reports(runs, tmp_path_factory):
    """``nox -s tests`` runs its tier on two pytest-xdist workers: the gate records each
    worker collects reach the controller, whose matrix, coverage and verdict are the
    single-process run's."""
    whole_dir, _ = runs
    workers_dir = tmp_path_factory.mktemp("workers")
    proc = run_pytest(
        "specgate/gates", "--models", VOCAB, "-n", "2", "--dist", "loadfile", "--report-dir", workers_dir
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 workers" in proc.stdout, proc.stdout[:2000]
    (whole,) = whole_dir.glob("parity-*.json")
    (spread,) = workers_dir.glob("parity-*.json")
    want, got = (json.loads(p.read_text(encoding="utf-8")) for p in (whole, spread))
    assert want["coverage"].get("pass", 0) > 0
    assert got["coverage"] == want["coverage"] and got["verdict"] == want["verdict"]
    assert want["verdict"] == {"result": "pass", "reasons": [], "rules": []}
    counts = [{k: v for k, v in row.items() if k != "metrics"} for row in want["matrix"]]
    assert [{k: v for k, v in row.items() if k != "metrics"} for row in got["matrix"]] == counts
    assert sorted(c["nodeid"] for c in got["cases"]) == sorted(c["nodeid"] for c in want["cases"])

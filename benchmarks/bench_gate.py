"""The main job's cost per stage and model, two commits side by side in one sitting.

For each commit (a temporary ``git worktree``), one after the other on the same machine
(never at the same time: each would slow the other), with the venv and models present
(warm): the setup steps the main job runs before its gate run (``specgate models fetch``,
``specgate models tiny``: a check of the cache when warm), then the gate run itself,
``python -m specgate.cli parity --impl oracle``, with that commit first on the path.
Measured: each step's wall time, the gate run's peak memory (the sum of proportional
set sizes of its process tree, sampled every ``SAMPLE_SECONDS``) and the machine's load average
before and after; then, from the run's JUnit XML and JSON report, the seconds and cases
per stage and model (the tiny models together: 27 rows of the same shape). Last, the ratios new/old.

    python benchmarks/bench_gate.py --old main --new HEAD [--repo .] [-- GATE-ARGS]

Or, without running anything, the same table from reports already written (each a
``--report-dir`` of one gate run, holding its ``parity-*.json`` and ``.xml``):

    python benchmarks/bench_gate.py --dirs before-reports after-reports
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from impl.process.tree_memory import tree_peak  # noqa: E402  (the suite's own tree measure)

#: How often the gate run's memory is sampled. Reading the proportional set sizes walks every
#: mapped page of the process (the 0.5B's 2 GB of weights) under its memory-map lock, which
#: stalls its page faults (``tree_peak`` reads them only when the resident sizes could hold a
#: new peak; the figures below are from before it). One commit's gate run on the same quiet machine: 146 s sampled
#: every 0.2 s, 123 and 130 s every 2 s, 111 and 116 s run bare. Compare commits within
#: one sitting of this script (the same perturbation on both), not with a bare run.
SAMPLE_SECONDS = 2.0


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float, int]:
    """(exit status, wall seconds, peak PSS bytes of the process tree) of one command."""
    start = time.monotonic()
    with log.open("a") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak, done = [0], threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_SECONDS):
                peak[0] = tree_peak(proc.pid, peak[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        status = proc.wait()
        done.set()
        sampler.join()
    return status, time.monotonic() - start, peak[0]


def stage_table(report_dir: Path) -> dict[tuple[str, str], list[float]]:
    """(stage, model) -> [seconds, cases] of one gate run, from its JUnit XML (times) and
    JSON report (each case's stage and model)."""
    (xml_path,) = sorted(report_dir.glob("parity-*.xml"))[:1] or [None]
    report_path = xml_path.with_suffix(".json") if xml_path else None
    if xml_path is None or not report_path.exists():
        raise SystemExit(f"{report_dir}: no parity-*.xml with its .json beside it")
    seconds = {}
    for case in ET.parse(xml_path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        seconds[f"{module}::{case.get('name')}"] = float(case.get("time", 0.0))
    table: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for case in json.loads(report_path.read_text())["cases"]:
        model = case["model"] or "-"
        model = "tiny-* (all tiny models)" if model.startswith("tiny-") else model
        row = table[(case["stage"].split("/")[0], model)]
        row[0] += seconds.get(case["nodeid"], 0.0)
        row[1] += 1
    return table


def has_workers(gate_args: list[str]) -> bool:
    """Whether the gate arguments ask for xdist workers (``-n 2``, ``-n2``, ``--numprocesses=2``)."""
    return any(a.startswith(("-n", "--numprocesses")) for a in gate_args)


def run_commit(repo: Path, commit: str, workdir: Path, gate_args: list[str]) -> dict[str, object]:
    tree = workdir / commit.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tree), commit], check=True
    )
    try:
        sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        if has_workers(gate_args):  # as ``nox -s parity`` runs its workers: one BLAS thread each
            env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        reports, log = workdir / f"reports-{sha}", workdir / f"{sha}.log"
        steps, before = {}, load()
        for name, args in (("models fetch", ["models", "fetch"]), ("models tiny", ["models", "tiny"])):
            status, wall, _ = timed([sys.executable, "-m", "specgate.cli", *args], tree, env, log)
            steps[name] = wall if status == 0 else float("nan")
        cmd = [
            sys.executable,
            "-m",
            "specgate.cli",
            "parity",
            "--impl",
            "oracle",
            "--report-dir",
            str(reports),
        ]
        status, wall, peak = timed([*cmd, *gate_args], tree, env, log)
        steps["gate run"] = wall
        return {"commit": sha, "status": status, "steps": steps, "peak": peak,
                "load": f"{before} -> {load()}", "table": stage_table(reports)}  # fmt: skip
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)


def print_side_by_side(results: list[dict[str, object]]) -> None:
    old, new = results
    print(f"machine: {os.cpu_count()} cores; load average (1, 5, 15 min) before -> after each run")
    for r in results:
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in r.get("steps", {}).items())
        peak = f", peak {r['peak'] / 1e9:.2f} GB (PSS)" if r.get("peak") else ""
        print(
            f"  {r['commit']}: exit {r.get('status', '?')}, {steps or 'from reports'}{peak}, load {r.get('load', '?')}"
        )
    keys = sorted(set(old["table"]) | set(new["table"]), key=lambda k: -max(old["table"].get(k, [0, 0])[0],
                                                                           new["table"].get(k, [0, 0])[0]))  # fmt: skip
    width = max([len("stage"), *(len(k[0]) for k in keys)]) + 2  # state_conversation is 18 characters
    print(
        f"\n{'stage':<{width}}{'model':<30}{'cases':>7}{old['commit'][:10]:>12}{new['commit'][:10]:>12}{'new/old':>9}"
    )
    totals = [[0.0, 0], [0.0, 0]]
    for key in keys:
        a, b = old["table"].get(key, [0.0, 0]), new["table"].get(key, [0.0, 0])
        cases = f"{a[1]}" if a[1] == b[1] else f"{a[1]}->{b[1]}"
        ratio = f"{b[0] / a[0]:.2f}" if a[0] > 0 else "-"
        print(f"{key[0]:<{width}}{key[1][:29]:<30}{cases:>7}{a[0]:>11.1f}s{b[0]:>11.1f}s{ratio:>9}")
        for t, row in zip(totals, (a, b), strict=True):
            t[0] += row[0]
            t[1] += row[1]
    (ta, ca), (tb, cb) = totals
    print(
        f"{'all':<{width}}{'':<30}{f'{ca}->{cb}' if ca != cb else ca:>7}{ta:>11.1f}s{tb:>11.1f}s{tb / max(ta, 1e-9):>9.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="the commit to compare against")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--repo", default=str(ROOT))
    parser.add_argument("--dirs", nargs=2, metavar=("OLD", "NEW"), help="two report dirs already written")
    parser.add_argument("gate_args", nargs="*", help="more arguments for the gate run (after --)")
    args = parser.parse_args()
    if args.dirs:
        results = [{"commit": Path(d).name, "table": stage_table(Path(d))} for d in args.dirs]
    elif args.old:
        with tempfile.TemporaryDirectory(prefix="specgate-bench-gate-") as tmp:
            results = [
                run_commit(Path(args.repo), c, Path(tmp), args.gate_args) for c in (args.old, args.new)
            ]
    else:
        parser.error("give --old (and --new) to run two commits, or --dirs OLD NEW")
    print_side_by_side(results)
    return 0 if all(r.get("status", 0) in (0, 1) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The suite's own cost, side by side in one sitting: ``nox -s <sessions>`` from a fresh
clone of each of two commits, one after the other on the same machine (never at the same
time: each would slow the other), with the wheel and the models cached (warm).

For each run: the wall time of the whole nox command, the peak memory of its process tree
(the sum of proportional set sizes of nox and everything under it, sampled every 0.2 s),
the pytest summary lines, and the machine's load average before and after. Then the
ratios new/old. The clones go under a temporary directory that is removed afterwards.

    python benchmarks/bench_suite.py --old 64e9eb7 --new HEAD [--sessions tests] [--repo .]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from impl.process.tree_memory import tree_peak  # noqa: E402  (the suite's own tree measure)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(repo: Path, commit: str, sessions: list[str], workdir: Path) -> dict[str, object]:
    clone = workdir / commit.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    sha = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    log = workdir / f"{sha}.log"
    before = load()
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(["nox", "-s", *sessions], cwd=clone, stdout=out, stderr=subprocess.STDOUT)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = tree_peak(proc.pid, peak[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        status = proc.wait()
        done.set()
        sampler.join()
    wall = time.monotonic() - start
    text = log.read_text(errors="replace")
    summaries = re.findall(r"^=+ (\d+ passed.*?) =+$", text, re.M)
    return {"commit": sha, "status": status, "wall": wall, "peak": peak[0], "summaries": summaries,
            "load": f"{before} -> {load()}", "log": text}  # fmt: skip


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the commit to compare against")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--sessions", default="tests", help="comma-separated nox sessions (default: tests)")
    parser.add_argument("--repo", default=str(ROOT))
    args = parser.parse_args()
    if shutil.which("nox") is None:
        parser.error("nox is not on PATH (python3 -m pip install nox)")
    sessions = args.sessions.split(",")
    with tempfile.TemporaryDirectory(prefix="specgate-bench-suite-") as tmp:
        results = [run(Path(args.repo), commit, sessions, Path(tmp)) for commit in (args.old, args.new)]
    print(
        f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    )
    print(f"nox -s {' '.join(sessions)}, fresh clones, one after the other")
    print(f"{'commit':10} {'exit':>4} {'wall':>9} {'peak (PSS)':>11}  load before -> after   pytest")
    for r in results:
        print(f"{r['commit']:10} {r['status']:>4} {minutes(r['wall']):>9} {r['peak'] / 1e9:>8.2f} GB  "
              f"{r['load']:22} {' | '.join(r['summaries'])}")  # fmt: skip
    old, new = results
    print(
        f"new/old: wall {new['wall'] / old['wall']:.2f}, peak memory {new['peak'] / max(old['peak'], 1):.2f}"
    )
    return 0 if all(r["status"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

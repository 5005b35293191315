"""The cost of the trace stage's walk on a long prompt: engine requests, bytes answered,
wall time and peak memory (specgate's side and the engine's).

    python benchmarks/bench_trace.py [MODEL] [BUG]

The engine is a real ``cmd:`` process: the oracle with a planted bug
(``tests/engines/mutants/forward_bugs.py BUG``; ``none`` serves the plain oracle, which
walks to a pass). The reference is the oracle's own trace in this process (every
point but ``result_output``, which is kept at the 16 rows the walk asks), standing in
for transformers' — the walk's cost does not depend on who the reference is. Prints
one line per measure; not a timed test.
"""

from __future__ import annotations

import resource
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from impl.oracle import OracleEngine  # noqa: E402
from impl.process.client import CmdEngine  # noqa: E402
from oracle.trace import KINDS, all_points  # noqa: E402
from specgate.checks import trace as checks  # noqa: E402
from specgate.supply.models import model_ref  # noqa: E402
from specgate.upkeep.corpus import prompts  # noqa: E402


def main(model_id: str = "qwen2.5-coder-0.5b-instruct", bug: str = "rope_base") -> None:
    model = model_ref(model_id)
    oracle = OracleEngine()
    ids = oracle.encode(model, str(prompts()["long_code_512"]["text"]), parse_special=True)[:512]
    n_layer, head_dim = (oracle.metadata(model)["hparams"][k] for k in ("n_layer", "head_dim"))
    rows = checks.spread(len(ids), checks.OUTPUT_ROWS)
    points = [p for p in all_points(n_layer) if p != "result_output"]
    reference = {p: v.astype(np.float64) for p, v in oracle.trace(model, ids, points).items()}
    reference["result_output"] = oracle.trace(model, ids, ["result_output"], rows)["result_output"].astype(
        np.float64
    )
    oracle.release_forward()
    script = ROOT / "tests" / "engines" / "mutants" / "forward_bugs.py"
    command = [sys.executable, "-m", "specgate.cli", "engine", "--impl", "oracle"]
    if bug != "none":
        command = [sys.executable, str(script), bug]
    engine = CmdEngine(shlex.join(command), timeout=600)
    answered = []

    def fetch(asked: list[str], positions: list[int] | None) -> dict[str, np.ndarray]:
        got = engine.trace(model, ids, asked, positions)
        answered.append(sum(v.nbytes for v in got.values()))
        return got

    start = time.monotonic()
    mine_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    verdict = checks.walk(fetch, reference, n_layer, head_dim, "exact", frozenset(KINDS), rows, None)
    seconds = time.monotonic() - start
    engine.close()
    print(f"model {model_id}, {len(ids)} tokens, bug {bug}")
    print(f"verdict: {verdict.message().splitlines()[0]}")
    print(
        f"requests: {verdict.requests}; float32 answered per request (MB): {[round(b / 1e6, 1) for b in answered]}"
    )
    print(f"walk wall time: {seconds:.1f} s (the engine's forward passes included)")
    print(
        f"peak RSS: specgate {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB "
        f"(before the walk {mine_before / 1e6:.2f} GB, holding the float64 reference), "
        f"engine {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6:.2f} GB"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Diagnosing and shrinking one failing 512-token case of the 0.5B model cost the gate
under 2 GB of committed memory above the baseline, plus the judge's one loaded model
mapped from the weights store (issue 38: 1.2 GB grew to 3.3 GB with the diagnosis and
5.1 GB with the shrinking, then MemoryError; measured here before the fixes: +7.1 GiB
over the baseline, then +2.40 GiB with the float32 weights held as anonymous memory).

What is measured, and why. The judge runs the oracle's forward on float32 weights: on
the 0.5B they are 1.84 GiB (``oracle.weights``: every matrix kept, none streamed). They
are dequantized once per machine into the weights store (``oracle.weights_store``) and
*mapped* read-only from its ``.npy`` files — clean, file-backed pages, which the kernel
drops and reads again under pressure like any page cache, and which every process
mapping them shares. The resident size (``VmHWM``) counts them like the process's own
memory; they are not committed. So the bound the issue asks for ("under 2 GB above the
baseline") is asserted on the anonymous memory (``RssAnon``: what the process commits
and the kernel cannot drop), sampled every 0.1 s by ``tests/engines/peak_rss.py``, and
two more assertions keep the rest honest: the weights really are file-backed (the
mapped file pages grow by at least half the weights — with the store off, or the
weights copied into the process, they do not and the anonymous peak grows by them), and
the proportional set size (``Pss``, file pages counted whole when only this process maps
them) stays under the weights — counted from the GGUF's tensor table, not measured —
plus 1 GiB.

The engine is ``forward_bugs.py random_logits`` (a real ``cmd:`` process answering
seeded Gaussian logits, no forward: it fails both classes and no hypothesis explains
it). The same one-case run is measured twice, each in a fresh gate process (the
engine's process is not counted): without diagnosis and shrinking (the baseline: the
gate and the engine's 512 x 151,936 answers), then with both. What the second adds is
the judge's own work: the oracle's forward weights mapped once, shared by the
diagnosis' deviated forwards and the shrinking's oracle, and every comparison of a
[512, n_vocab] answer made a few positions at a time. The weights store is the one the
gate would use (``SPECGATE_WEIGHTS_STORE``, else the cache's); a cold store is filled
by the first run, each matrix mapped back once written. Measured on a shared 2-core
machine: +0.42 GiB anonymous, +1.93 GiB mapped file pages, +2.35 GiB PSS (the weights
1.84 GiB). With ``SPECGATE_WEIGHTS_STORE=off`` the weights are the process's own and the
test fails, as it should: +2.31 GiB (2.48 GB) anonymous.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import ParityRun, run_parity, script_impl

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "mutants" / "forward_bugs.py"
MODEL = "qwen2.5-coder-0.5b-instruct"
GB = 1 << 30
COMMITTED = 2 * 10**9  # the bound on what judging adds: 2 GB anonymous (measured: +0.42 GiB)
ABOVE_THE_WEIGHTS = 1 * GB  # what the PSS may add to the mapped weights

pytestmark = pytest.mark.slow  # two gate runs of a 512-token case on the 0.5B model: minutes


@pytest.fixture(autouse=True)
def model() -> None:
    if MODEL not in model_cache.cached_models():
        model_missing(f"{MODEL}; run: specgate models fetch {MODEL}")


def float32_weights_bytes(model_id: str) -> int:
    """The model's weights in float32, as a forward keeps them: every tensor but the token
    embedding where the GGUF has its own output matrix (an embedding is read by rows)."""
    from oracle.gguf import open_gguf

    tensors = open_gguf(model_cache.model_ref(model_id).gguf).tensors
    skipped = {"token_embd.weight"} if "output.weight" in tensors else set()
    return sum(4 * int(np.prod(t.shape)) for name, t in tensors.items() if name not in skipped)


def gate(tmp_path: Path, diagnose: str, shrink: str) -> ParityRun:
    run = run_parity(
        tmp_path, script_impl(ENGINE, "random_logits"), "logits", MODEL, "-k", "long_code_512",
        "--diagnose-budget", diagnose, "--shrink-budget", shrink, "--shrink-group-budget", shrink,
        env={"SPECGATE_CMD_TIMEOUT": "900"},  # a 311 MB answer on a saturated machine: no hang
        measure=True, timeout=3000,
    )  # fmt: skip
    assert run.status == 1 and run.outcomes() == {"fail": 2}, run.output[-3000:]
    assert run.own_peak_bytes, "the gate's own peak was measured"
    return run


def test_judging_a_512_token_case_commits_under_2_gb_and_maps_the_weights(tmp_path: Path) -> None:
    baseline = gate(tmp_path / "baseline", "0", "0")
    judged = gate(tmp_path / "judged", "300", "60")
    groups = judged.report["groups"]
    assert groups and all(g["stage"].startswith("logits/") for g in groups), groups
    # the judge's work happened whatever the machine's speed: a group's shrinking replays its
    # 512-token case against the oracle before any budget is looked at
    replayed = [
        g for g in groups if g.get("reproducer_file") or "original case" in (g.get("shrink_note") or "")
    ]
    assert replayed, [(g["stage"], g.get("shrink_note")) for g in groups]
    assert baseline.own_peaks and judged.own_peaks, "the gate's own peaks were sampled"
    grown = {part: judged.own_peaks[part] - baseline.own_peaks[part] for part in ("anon", "file", "pss")}
    weights = float32_weights_bytes(MODEL)
    seen = (
        f"above the baseline (anonymous {baseline.own_peaks['anon'] / GB:.2f} GiB, PSS "
        f"{baseline.own_peaks['pss'] / GB:.2f} GiB, resident {baseline.own_peak_bytes / GB:.2f} GiB), diagnosis "
        f"and shrinking added: anonymous +{grown['anon'] / GB:.2f} GiB ({grown['anon'] / 1e9:.2f} GB), mapped "
        f"file pages +{grown['file'] / GB:.2f} GiB, PSS +{grown['pss'] / GB:.2f} GiB, resident "
        f"+{(judged.own_peak_bytes - baseline.own_peak_bytes) / GB:.2f} GiB; the float32 weights {weights / GB:.2f} GiB"
    )
    print(seen)
    assert grown["anon"] < COMMITTED, f"committed memory over 2 GB: {seen}"
    assert grown["file"] > weights // 2, f"the weights are not mapped from the weights store: {seen}"
    assert grown["pss"] < weights + ABOVE_THE_WEIGHTS, f"PSS over the weights + 1 GiB: {seen}"

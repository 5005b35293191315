"""How far llama.cpp's own logits move with the chunking of a prefill, measured on the
state stages' cases: the float noise the ``quantized`` class of ``state_incremental`` and
``state_conversation`` has to absorb, before an engine built on llama.cpp is judged on it.

Per case of a model's committed ``state_incremental`` / ``state_conversation`` snapshots,
llama.cpp (the suite's in-process reference context, ``impl.llamacpp``: plain buffers,
every position's logits kept, SPECGATE_LLAMA_THREADS threads) evaluates the judged ids in several chunkings on one context — whole; one token at a
time; the case's own chunks (or each turn's kept prefix, then the rest); a prefix of 1..8
tokens then the rest — and each last-position row is judged exactly as the gate judges it
(``specgate.checks.state.judge_row``, quantized class). Printed: per case the mean KL of
each chunking to the state reference and to llama.cpp's own one-shot row, and the
largest of each; the class's bound beside them.

    python benchmarks/state_noise.py [--model qwen2.5-coder-0.5b-instruct]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from impl.llamacpp.engine import LlamaCppEngine
from specgate.checks import state
from specgate.checks.logits import QUANTIZED_KL_MEAN
from specgate.upkeep import snapshots
from specgate.upkeep.model_ids import model_for


def log_softmax(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def kl(p_row: np.ndarray, q_row: np.ndarray) -> float:
    lp, lq = log_softmax(p_row), log_softmax(q_row)
    return float((np.exp(lp) * (lp - lq)).sum())


def chunkings(ids: list[int], own: list[int]) -> dict[str, list[int]]:
    """Chunk sizes per named chunking of ``ids``."""
    n = len(ids)
    out = {"whole": [n], "one_by_one": [1] * n, "own": own}
    for k in (1, 2, 4, 8):
        if k < n:
            out[f"prefix_{k}"] = [k, n - k]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    args = parser.parse_args()
    from importlib.metadata import version

    model = model_for(args.model)
    llm = LlamaCppEngine().llama(model, vocab_only=False)  # the suite's llama.cpp reference context

    def last_row(ids: list[int], sizes: list[int]) -> np.ndarray:
        llm.reset()
        at = 0
        for size in sizes:
            llm.eval(ids[at : at + size])
            at += size
        return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)

    points = []  # (case, ids, reference, its own chunk sizes)
    for case_id, case in snapshots.load(model, "state_incremental").items():
        if case_id.endswith("_whole"):  # one prompt, three chunkings: measured once per prompt
            points.append(
                (case_id.removesuffix("_whole"), case["ids"], case["reference"], [len(case["ids"])])
            )
    for case_id, case in snapshots.load(model, "state_conversation").items():
        for number, turn in enumerate(case["turns"], 1):
            keep, n = turn["keep"], len(turn["ids"])
            own = [keep, n - keep] if 0 < keep < n else [n]
            points.append((f"{case_id}/turn {number}", turn["ids"], turn["reference"], own))

    worst_ref: dict[str, float] = {}
    worst_self: dict[str, float] = {}
    print(
        f"model {model.id}; llama-cpp-python {version('llama-cpp-python')}; quantized class bound: mean KL <= {QUANTIZED_KL_MEAN}"
    )
    for name, ids, reference, own in points:
        one_shot = last_row(ids, [len(ids)])
        cells = []
        for label, sizes in chunkings(ids, own).items():
            row = one_shot if label == "whole" else last_row(ids, sizes)
            _, cmp = state.judge_row("quantized", model.id, ids, reference, row)
            to_self = kl(one_shot, row)
            worst_ref[label] = max(worst_ref.get(label, 0.0), cmp.kl_mean)
            worst_self[label] = max(worst_self.get(label, 0.0), to_self)
            cells.append(f"{label} {cmp.kl_mean:.2e}/{to_self:.1e}")
        print(f"{name} ({len(ids)} ids): " + "; ".join(cells))
    print("worst KL to the state reference / to llama.cpp's one-shot row, per chunking:")
    for label in worst_ref:
        print(f"  {label:11s} {worst_ref[label]:.3e} / {worst_self[label]:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Forward-pass speed and memory, side by side in one run: the oracle, transformers
(float32, loading the same GGUF) and llama.cpp (2 threads) on the same model.

Each engine runs in its own subprocess so that its peak RSS (``ru_maxrss``) is its
own: load, one warm-up prefill, then ``--repeats`` rounds of a timed prefill of
``--prefill`` tokens from an empty cache and ``--decode`` greedy single-token steps on
the KV cache; the median round's prefill and decode times are reported. One round is not
enough on a shared machine: the same engine's prefill varied by ±15 % from one run to the
next (2-core VM, 2026-12-07), more than the differences measured, and three runs in a row
read the oracle's prefill at 1.29x, 1.01x and 1.30x transformers'. ``--sittings N`` runs the
engines N times in turn (every other sitting in the reverse order) and shows the ratio of
each sitting and their median.

    python benchmarks/bench_forward.py [--model qwen2.5-coder-0.5b-instruct] [--prefill 512] [--decode 32] [--repeats 5] [--sittings 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENGINES = ("oracle", "oracle_streaming", "transformers", "llamacpp")
THREADS = 2
MODEL_ID = "qwen2.5-coder-0.5b-instruct"  # set from --model in the child
REPEATS = 5  # set from --repeats in the child


def median_round(one_round) -> dict[str, float]:
    """``one_round()`` -> (prefill seconds, decode seconds), ``REPEATS`` times: the medians."""
    rounds = [one_round() for _ in range(REPEATS)]
    return {"prefill_s": statistics.median(r[0] for r in rounds),
            "decode_s": statistics.median(r[1] for r in rounds)}  # fmt: skip


def _ids(n: int) -> list[int]:
    import numpy as np

    return [int(x) for x in np.random.default_rng(0).integers(0, 151_000, n)]


def run_oracle(
    path: Path, prefill: list[int], n_decode: int, budget_bytes: int | None = None
) -> dict[str, float]:
    from oracle.forward import Model
    from oracle.weights import DEFAULT_BUDGET_BYTES

    t = time.perf_counter()
    model = Model.from_gguf(path, budget_bytes=DEFAULT_BUDGET_BYTES if budget_bytes is None else budget_bytes)
    model.prefill(prefill[:8])  # warm-up: dequantizes and caches the weights
    load = time.perf_counter() - t

    def one_round() -> tuple[float, float]:
        model.reset()
        t = time.perf_counter()
        logits = model.prefill(prefill)
        t_prefill = time.perf_counter() - t
        token = int(logits[-1].argmax())
        t = time.perf_counter()
        for _ in range(n_decode):
            token = int(model.step(token).argmax())
        return t_prefill, time.perf_counter() - t

    return {"load_s": load, **median_round(one_round)}


def run_oracle_streaming(path: Path, prefill: list[int], n_decode: int) -> dict[str, float]:
    """The oracle with a zero weight budget: every matrix dequantized on each use (the
    memory floor a model far larger than the budget runs at)."""
    return run_oracle(path, prefill, n_decode, budget_bytes=0)


def run_transformers(path: Path, prefill: list[int], n_decode: int) -> dict[str, float]:
    import torch

    from impl.hf.forward import load_transformers_gguf

    torch.set_num_threads(THREADS)
    t = time.perf_counter()
    model = load_transformers_gguf(path)
    with torch.inference_mode():
        model(torch.tensor([prefill[:8]]))
        load = time.perf_counter() - t

        def one_round() -> tuple[float, float]:
            t = time.perf_counter()
            out = model(torch.tensor([prefill]), use_cache=True)  # a new cache each round
            t_prefill = time.perf_counter() - t
            past, token = out.past_key_values, int(out.logits[0, -1].argmax())
            t = time.perf_counter()
            for _ in range(n_decode):
                out = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past, token = out.past_key_values, int(out.logits[0, -1].argmax())
            return t_prefill, time.perf_counter() - t

        return {"load_s": load, **median_round(one_round)}


def run_llamacpp(path: Path, prefill: list[int], n_decode: int) -> dict[str, float]:
    """Through specgate's llama.cpp adapter (its context settings: n_ctx 4096, logits for all positions)."""
    import numpy as np

    from impl.llamacpp.engine import LlamaCppEngine
    from specgate.supply.models import model_ref

    t = time.perf_counter()
    llm = LlamaCppEngine().llama(model_ref(MODEL_ID), vocab_only=False)
    llm.eval(prefill[:8])
    load = time.perf_counter() - t

    def one_round() -> tuple[float, float]:
        llm.reset()
        t = time.perf_counter()
        llm.eval(prefill)
        t_prefill = time.perf_counter() - t
        token = int(np.argmax(llm.scores[len(prefill) - 1]))
        t = time.perf_counter()
        for _ in range(n_decode):
            llm.eval([token])
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return t_prefill, time.perf_counter() - t

    return {"load_s": load, **median_round(one_round)}


def child(engine: str, path: Path, n_prefill: int, n_decode: int) -> None:
    result = globals()[f"run_{engine}"](path, _ids(n_prefill), n_decode)
    result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB
    print(json.dumps(result))


def one_sitting(args: argparse.Namespace, env: dict[str, str], reverse: bool) -> tuple[float, float] | None:
    """Each engine once, one after another (in the reverse order with ``reverse``, so that
    a drift within sittings favours no engine): its table, and the oracle's speed over
    transformers' (prefill, decode) when both ran."""
    rows = {}
    engines = args.engines.split(",")
    for engine in reversed(engines) if reverse else engines:
        proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--prefill", str(args.prefill),
                               "--decode", str(args.decode), "--repeats", str(args.repeats), "--child", engine],
                              capture_output=True, text=True, env=env)  # fmt: skip
        if proc.returncode != 0:
            print(f"{engine}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        rows[engine] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{'engine':<14}{'load s':>8}{'prefill tok/s':>15}{'decode tok/s':>14}{'peak RSS GB':>13}")
    for engine, r in rows.items():
        print(f"{engine:<14}{r['load_s']:>8.1f}{args.prefill / r['prefill_s']:>15.1f}"
              f"{args.decode / r['decode_s']:>14.2f}{r['peak_rss_gb']:>13.2f}")  # fmt: skip
    if "oracle" not in rows or "transformers" not in rows:
        return None
    o, t = rows["oracle"], rows["transformers"]
    ratio = (t["prefill_s"] / o["prefill_s"], t["decode_s"] / o["decode_s"])
    print(
        f"oracle / transformers: prefill {ratio[0]:.2f}x, "
        f"decode {ratio[1]:.2f}x, peak RSS {o['peak_rss_gb'] / t['peak_rss_gb']:.2f}x"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--prefill", type=int, default=512)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument(
        "--repeats", type=int, default=REPEATS, help="timed rounds per engine (the median is shown)"
    )
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--sittings",
        type=int,
        default=1,
        help="run every engine this many times in turn and show the ratio of each sitting and their "
        "median (this machine's speed drifts between sittings by more than the engines differ)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sittings < 1 or args.repeats < 1:
        parser.error("--sittings and --repeats must be at least 1")
    from specgate.supply.models import model_ref

    path = model_ref(args.model).gguf
    if args.child:
        globals()["MODEL_ID"], globals()["REPEATS"] = args.model, args.repeats
        child(args.child, path, args.prefill, args.decode)
        return 0
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(THREADS),
        "OPENBLAS_NUM_THREADS": str(THREADS),
        "SPECGATE_LLAMA_THREADS": str(THREADS),
    }
    print(f"model {args.model} ({path.stat().st_size / 1e9:.2f} GB GGUF), prefill {args.prefill} tokens, "
          f"decode {args.decode} tokens, {THREADS} threads, median of {args.repeats} rounds")  # fmt: skip
    ratios = []
    for sitting in range(1, args.sittings + 1):
        if args.sittings > 1:
            print(f"sitting {sitting} of {args.sittings}")
        ratio = one_sitting(args, env, reverse=sitting % 2 == 0)
        if ratio is not None:
            ratios.append(ratio)
    if len(ratios) > 1:  # each sitting's engines ran one after another: their ratio is the fair one
        for name, at in (("prefill", 0), ("decode", 1)):
            got = sorted(r[at] for r in ratios)
            print(f"oracle / transformers {name} per sitting: {', '.join(f'{x:.2f}x' for x in got)}; "
                  f"median {statistics.median(got):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory of the oracle on a 7B-shaped Q4_K_M model, which the machines this suite
targets cannot download: the file is synthesized.

The GGUF has Qwen2.5-7B's shapes (28 layers, n_embd 3584, n_ff 18944, 28 query / 4 kv
heads, the real Qwen vocabulary of the 0.5B model's GGUF) and Q4_K_M's tensor types
(Q4_K for most matrices; Q6_K for ``output``, ``attn_v`` and ``ffn_down`` — Q4_K_M
gives Q6_K to only half of the latter two, so this file is slightly larger). Its
blocks hold random quants with small, finite scales: meaningless weights that
dequantize and multiply exactly like real ones, which is all a memory measurement
needs. The oracle then runs a short prefill and a few decode steps in a subprocess,
whose peak RSS (``ru_maxrss``, mapped file pages included) is reported.

    python benchmarks/bench_memory.py [--dir <specgate cache>/synthetic] [--prefill 8] [--decode 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPE = {"n_embd": 3584, "n_ff": 18944, "n_layer": 28, "n_head": 28, "n_head_kv": 4}
LIMIT_GB = 12.0  # the forward issue's bound for a 7B Q4_K_M model


def quantized_blocks(rng: np.random.Generator, n_rows: int, n_cols: int, type_name: str) -> np.ndarray:
    """[n_rows, bytes per row] of random Q4_K / Q6_K super-blocks (256 weights each)
    whose f16 scales are small and finite."""
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.constants import GGMLQuantizationType as T

    qtype = T[type_name]
    block_weights, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_rows, n_cols // block_weights, block_bytes), dtype=np.uint8)
    if qtype == T.Q4_K:  # d, dmin (f16) lead the block
        blocks[..., 0:4] = np.array([0.002, 0.001], dtype=np.float16).view(np.uint8)
    else:  # Q6_K: ql, qh, int8 scales, then d (f16) at the end
        blocks[..., -2:] = np.array([0.0005], dtype=np.float16).view(np.uint8)
    return blocks.reshape(n_rows, -1)


def synthesize(out: Path, vocab_gguf: Path) -> Path:
    """Write the 7B-shaped Q4_K_M GGUF (about 4.9 GB) unless it exists."""
    from gguf import GGUFWriter
    from gguf.constants import GGMLQuantizationType as T

    from oracle.gguf import open_gguf
    from specgate.supply.convert import copy_tokenizer

    if out.exists():
        return out
    e, ff, n_layer = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_layer"]
    head_dim = e // SHAPE["n_head"]
    kv = SHAPE["n_head_kv"] * head_dim
    n_vocab = len(open_gguf(vocab_gguf, header_only=True).metadata["tokenizer.ggml.tokens"])
    rng = np.random.default_rng(0)
    tmp = out.with_suffix(".partial")
    w = GGUFWriter(str(tmp), "qwen2")
    w.add_name("synthetic-qwen2.5-7b-q4_k_m")
    w.add_context_length(32768)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff)
    w.add_block_count(n_layer)
    w.add_head_count(SHAPE["n_head"])
    w.add_head_count_kv(SHAPE["n_head_kv"])
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    copy_tokenizer(w, vocab_gguf)

    def matrix(name: str, rows: int, cols: int, type_name: str) -> None:
        w.add_tensor(name, quantized_blocks(rng, rows, cols, type_name), raw_dtype=T[type_name])

    def vector(name: str, n: int, value: float) -> None:
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, e, "Q4_K")
    vector("output_norm.weight", e, 1.0)
    matrix("output.weight", n_vocab, e, "Q6_K")
    for i in range(n_layer):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", e, 1.0)
        vector(p + "ffn_norm.weight", e, 1.0)
        for name, rows in (("attn_q", e), ("attn_k", kv), ("attn_v", kv)):
            matrix(p + name + ".weight", rows, e, "Q6_K" if name == "attn_v" else "Q4_K")
            vector(p + name + ".bias", rows, 0.0)
        matrix(p + "attn_output.weight", e, e, "Q4_K")
        matrix(p + "ffn_gate.weight", ff, e, "Q4_K")
        matrix(p + "ffn_up.weight", ff, e, "Q4_K")
        matrix(p + "ffn_down.weight", e, ff, "Q6_K")
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    finally:
        w.close()
    tmp.rename(out)
    return out


def child(path: Path, n_prefill: int, n_decode: int) -> None:
    from oracle.forward import Model

    t = time.perf_counter()
    model = Model.from_gguf(path)
    ids = [int(x) for x in np.random.default_rng(0).integers(0, 151_000, n_prefill)]
    logits = model.prefill(ids)
    t_prefill = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n_decode):
        logits = model.step(int(logits[-1].argmax()))[None]
    print(json.dumps({
        "load_and_prefill_s": t_prefill,
        "decode_s_per_token": (time.perf_counter() - t) / max(n_decode, 1),
        "finite": bool(np.isfinite(logits).all()),
        "weights_cached_gb": model.weights.cached_bytes / 1e9,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }))  # fmt: skip


def main() -> int:
    from specgate.supply.models import cache_dir, model_ref

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--prefill", type=int, default=8)
    parser.add_argument("--decode", type=int, default=2)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.prefill, args.decode)
        return 0
    folder = args.dir or cache_dir() / "synthetic"
    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    path = synthesize(
        folder / "synthetic-qwen2.5-7b-q4_k_m.gguf", model_ref("qwen2.5-coder-0.5b-instruct").gguf
    )
    print(f"{path} ({path.stat().st_size / 1e9:.2f} GB, ready in {time.perf_counter() - t:.0f} s)")
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path), "--prefill", str(args.prefill), "--decode", str(args.decode)],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"oracle: load + {args.prefill}-token prefill {r['load_and_prefill_s']:.0f} s, "
          f"decode {r['decode_s_per_token']:.0f} s/token, logits finite: {r['finite']}, "
          f"weights kept in f32: {r['weights_cached_gb']:.2f} GB, peak RSS {r['peak_rss_gb']:.2f} GB "
          f"(limit {LIMIT_GB:g} GB: {'within' if r['peak_rss_gb'] < LIMIT_GB else 'OVER'})")  # fmt: skip
    return 0 if r["peak_rss_gb"] < LIMIT_GB else 1


if __name__ == "__main__":
    sys.exit(main())

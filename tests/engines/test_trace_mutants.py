"""Each planted forward bug is located by the trace gate at its layer and point.

The engines are ``tests/engines/mutants/forward_bugs.py BUG`` (and
``rope_interleaved.py``): the oracle with one bug, served over PROTOCOL.md as an
external process and gated by ``--stages trace/exact`` on a tiny model, exactly as an
engine author's engine would be. The report's message must name the point where the
bug first shows — derived here from what the bug touches, not from the engine — and
everything before it must be reported matching. The walk must stay within a handful of
requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.supply.models import model_ref
from tests.engines.parity_run import run_parity, script_impl

MUTANTS = Path(__file__).with_name("mutants")
MAX_REQUESTS = 3  # probes, the layers between, the departing layer's points


@dataclass(frozen=True)
class ForwardBug:
    bug: str
    model: str
    point: str  # the first point the bug changes: the verdict's
    where: str = ""  # a regex for the positions / heads / dims the verdict must name


def first_point_of_type(model_id: str, type_name: str) -> str:
    """The first trace point computed from a tensor of ``type_name`` (forward order)."""
    from oracle.gguf import open_gguf
    from oracle.trace import LAYER_POINTS

    reads = {"attn_norm": "attn_norm", "attn_q": "Qcur", "attn_k": "Kcur", "attn_v": "Vcur",
             "attn_output": "ffn_inp", "ffn_norm": "ffn_norm", "ffn_gate": "ffn_out", "ffn_up": "ffn_out",
             "ffn_down": "ffn_out"}  # fmt: skip
    g = open_gguf(model_ref(model_id).gguf)
    order: list[tuple[int, int, str]] = []
    for name, info in g.tensors.items():
        if info.type_name != type_name:
            continue
        if name == "token_embd.weight":
            order.append((-1, 0, "inp_embd"))
        elif name.startswith("blk."):
            _, layer, tensor, _ = name.split(".", 3)
            kind = reads[tensor]
            order.append((int(layer), LAYER_POINTS.index(kind), f"{kind}-{layer}"))
        else:
            order.append((10**6, 0 if name.startswith("output_norm") else 1,
                          "result_norm" if name.startswith("output_norm") else "result_output"))  # fmt: skip
    return min(order)[2]


CASES = [
    # position 0 is not rotated: only the later positions depart
    ForwardBug("rope_interleaved", "tiny-qwen2-f32", "Qcur-0", r"positions 1–7"),
    ForwardBug("rope_base", "tiny-qwen3-f32", "Qcur-0", r"positions 1–7"),
    ForwardBug("qk_norm_missing", "tiny-qwen3-f32", "Qcur-0", r"positions 0–7"),
    ForwardBug("rms_eps", "tiny-qwen2-f32", "attn_norm-0", r"positions 0–7"),
    ForwardBug("bias_missing", "tiny-qwen2-f32", "Qcur-0", r"positions 0–7"),
    # 4 query heads over 2 kv heads: heads 1 and 2 read the other kv head's values
    ForwardBug("gqa_order", "tiny-qwen2-f32", "kqv_out-0", r"positions 0–7, heads 1–2\b"),
    ForwardBug("swiglu_swapped", "tiny-qwen3-f32", "ffn_out-0", r"positions 0–7"),
    ForwardBug("q4_0_interleaved", "tiny-qwen2-q4_0", "first Q4_0"),
    # the last query has no key after it
    ForwardBug("mask_off_by_one", "tiny-qwen3-f32", "kqv_out-0", r"positions 0–6[;,]"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.bug for c in CASES])
def test_forward_bug_is_located(case: ForwardBug, tmp_path: Path) -> None:
    if case.model not in model_cache.cached_tiny_models():
        model_missing(f"{case.model} (run: specgate models tiny)")
    point = first_point_of_type(case.model, "Q4_0") if case.point == "first Q4_0" else case.point
    script = MUTANTS / ("rope_interleaved.py" if case.bug == "rope_interleaved" else "forward_bugs.py")
    args = () if case.bug == "rope_interleaved" else (case.bug,)
    run = run_parity(tmp_path, script_impl(script, *args), "trace/exact", case.model,
                     files=("specgate/gates/test_trace.py",), timeout=300)  # fmt: skip
    assert run.status == 1, run.output[-3000:]
    failed = [c for c in run.report["cases"] if c["outcome"] == "fail"]
    assert failed and all(c["stage"] == "trace/exact" for c in failed), run.output[-3000:]
    message = failed[0]["message"]
    layer = re.search(r"-(\d+)$", point)
    at = re.escape(point) + (rf" \(layer {layer.group(1)}\)" if layer else "")
    assert re.search(rf"first divergence at {at}, {case.where}", message), message
    assert re.search(r"relative error [\d.e+-]+ vs tol 0\.0001 \(max \|Δ\| [\d.e+-]+\)", message), message
    matched = re.search(r"matching before it: (.*)", message)
    assert (matched and "inp_embd" in matched.group(1).split(", ")) or point == "inp_embd", message
    requests = int(re.search(r"\((\d+) trace requests\)", message).group(1))
    assert requests <= MAX_REQUESTS, message

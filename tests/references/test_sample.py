"""Record the sample reference: llama.cpp's sampler chain, step by step, on logit
windows of each full-weights model and on crafted logit vectors, over the
parameter grid of corpus/sampler/.

The reference is the *documented* chain built from llama.cpp's samplers
(``impl.llamacpp.sampler``, flavour ``documented``). Each case also says whether
llama.cpp's own samplers (``native``) give a different result, and why — that
is the report of where the documented chain and llama.cpp's defaults differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgate.checks import sample as sample_checks
from specgate.run.selection import has_weights
from specgate.supply.models import is_known_id, load_manifest
from specgate.upkeep import snapshots

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.live

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "sampler"
GRID = tomllib.loads((CORPUS / "grid.toml").read_text(encoding="utf-8"))
#: A draw whose r lies this close to a cumulative-probability boundary is not
#: compared: float32 and float64 sums may put it on either side.
DRAW_MARGIN = 1e-4
WINDOWS = tomllib.loads((CORPUS / "windows.toml").read_text(encoding="utf-8"))


def model_windows(llama: Any, model: Any) -> dict[str, np.ndarray]:
    """Next-token logits after each window prompt, from llama.cpp's forward."""
    llm = llama.llama(model, vocab_only=False)
    out = {}
    for name, spec in WINDOWS["model"].items():
        ids = llm.tokenize(spec["prompt"].encode("utf-8"), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        out[name] = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
    return out


def compact(x: np.ndarray, keep: int) -> dict[str, Any]:
    """The ``keep`` highest logits of ``x`` (the rest become -inf)."""
    finite = np.flatnonzero(np.isfinite(x))
    top = finite[np.argsort(-x[finite], kind="stable")][:keep]
    top = np.sort(top)
    return {"n_vocab": len(x), "ids": top.tolist(), "values": [float(v) for v in x[top]]}


def penalty_window(spec: list[Any], logits: np.ndarray) -> list[int]:
    """Crafted window → token ids: ranks in the logit window, "out" (a token the
    window excludes), "oov" (past the vocabulary)."""
    ranked = np.argsort(-logits, kind="stable")
    excluded = int(np.flatnonzero(~np.isfinite(logits))[0])
    table = {"out": excluded, "oov": len(logits) + 7}
    return [table[t] if isinstance(t, str) else int(ranked[t]) for t in spec]


def grid_cases(name: str, logits: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any], float]]:
    x = sample_checks.logits_of({"logits": logits})
    out = {}
    for point, spec in GRID["points"].items():
        params = {k: v for k, v in spec.items() if k not in ("r", "penalty_window")}
        params["window"] = penalty_window(GRID["penalty_windows"][spec.get("penalty_window", "none")], x)
        out[f"{name}/{point}"] = (logits, params, float(spec.get("r", 0.5)))
    return out


def crafted_cases() -> dict[str, tuple[dict[str, Any], dict[str, Any], float]]:
    out = {}
    for name, spec in WINDOWS["crafted"].items():
        values = [float(v) for v in spec["logits"]]
        ids = [i for i, v in enumerate(values) if np.isfinite(v)]
        logits = {"n_vocab": len(values), "ids": ids, "values": [values[i] for i in ids]}
        for point, p in spec["points"].items():
            params = {k: v for k, v in p.items() if k != "r"}
            params.setdefault("window", [])
            out[f"crafted-{name}/{point}"] = (logits, params, float(p.get("r", 0.5)))
    return out


def reference_case(logits: dict[str, Any], params: dict[str, Any], r: float) -> dict[str, Any]:
    from impl.llamacpp import sampler as llamacpp_sampler

    x = sample_checks.logits_of({"logits": logits})
    full = llamacpp_sampler.run_chain(x, params, documented=True)
    documented = sample_checks.summarize(full)
    native = sample_checks.summarize(llamacpp_sampler.run_chain(x, params, documented=False))
    case: dict[str, Any] = {"logits": logits, "params": params, "r": r, **documented}
    if full["chain"][-1] == "greedy":
        case["token"] = full["ids"][0]
    else:
        token, margin = sample_checks.expected_draw(full["ids"], full["probs"], r)
        case["token"] = token if margin > DRAW_MARGIN else None
    case["llamacpp_native"] = None
    for want, got in zip(documented["steps"], native["steps"], strict=True):
        if want != got:
            case["llamacpp_native"] = (
                f"llama.cpp's own samplers differ from the documented chain from step {want['step']!r}: "
                f"{want['n']} vs {got['n']} candidates, top {want['top'][:3]} vs {got['top'][:3]}"
            )
            break
    tie = llamacpp_sampler.topk_tie(x, params)
    if tie:
        case["disagreement"] = tie
        case["sources"] = {"documented-top-k": keeping_ties(x, params, r)}
    return case


def keeping_ties(x: np.ndarray, params: dict[str, Any], r: float) -> dict[str, Any]:
    """The answer of PROTOCOL.md 4.4's top-k, which keeps every token tied with the k-th,
    computed by llama.cpp's samplers with k widened to the tied tokens: the steps, the
    final candidates and the draw an engine following the documented rule gives."""
    from impl.llamacpp import sampler as llamacpp_sampler

    p = llamacpp_sampler.resolve_params(params)
    cands = llamacpp_sampler.Candidates(x)
    for step in p["chain"][: p["chain"].index("top_k")]:
        for smpl in llamacpp_sampler._samplers(step, len(x), p, documented=True):
            cands.apply(smpl)
    ranked = np.sort(cands.read()["logit"])[::-1]
    wide = {**params, "top_k": int(np.sum(ranked >= ranked[p["top_k"] - 1]))}
    full = llamacpp_sampler.run_chain(x, wide, documented=True)
    token, margin = sample_checks.expected_draw(full["ids"], full["probs"], r)
    summary = sample_checks.summarize(full)
    return {
        "steps": summary["steps"],
        "final": summary["final"],
        "token": token if margin > DRAW_MARGIN else None,
    }


def recorded_here(model_id: str, model_of) -> bool:
    """This stage's recorded models, and a user's own GGUF, when they have weights."""
    listed = model_id in WINDOWS["models"] or not is_known_id(model_id)
    return listed and has_weights(model_id, load_manifest(), model_of)


@pytest.mark.applies_to.with_args(recorded_here, models=True)
def test_record_sample(request, reference, model_id, model):
    llama = reference("llamacpp")
    if snapshots.recording(request):
        inputs = {name: compact(x, WINDOWS["keep"]) for name, x in model_windows(llama, model).items()}
    else:
        root = snapshots.root_of(request.config)
        inputs = sample_checks.stored_windows(snapshots.load(model, "sample", root))
        live = model_windows(llama, model)
        drifted = [
            why for name, x in live.items() if (why := sample_checks.window_drift(name, inputs.get(name), x))
        ]
        assert not drifted, (
            f"{model.id}/sample: {drifted[0]}\nregenerate with: {snapshots.regenerate_command(model, root)}"
        )
    specs = {k: v for name, logits in inputs.items() for k, v in grid_cases(name, logits).items()}
    specs.update(crafted_cases())
    cases = {case_id: reference_case(*spec) for case_id, spec in specs.items()}
    snapshots.record(
        request,
        llama,
        model,
        "sample",
        cases,
        references={
            "llamacpp": "llama_sampler_apply of penalties/top_k/top_p/min_p/temp/greedy, dist softmax, "
            "on next-token logits from llama.cpp's forward (documented chain order)"
        },
        packages=("llama-cpp-python",),
    )

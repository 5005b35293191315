"""How the sample stage's cases are built from the references (``Stage.build``):
every logit window (a model's next-token logits, compacted to its top entries) at
every point of the parameter grid (``corpus/sampler/grid.toml``), and the crafted
vectors of ``corpus/sampler/windows.toml`` at their own points, each run through
llama.cpp's samplers in the documented chain (``impl.llamacpp.sampler``, the
reference) and in llama.cpp's own order (a difference is noted), with the draw at
``r`` and, where top-k cuts inside a tie, the documented rule's answer as a second
source. The windows are arguments: the recorder (``tests/references/test_sample.py``)
takes them from llama.cpp's forward (``model_windows``) or from the stored snapshot."""

from __future__ import annotations

from typing import Any

import numpy as np

from specgate.checks import sample as sample_checks

#: A draw whose r lies this close to a cumulative-probability boundary is not
#: compared: float32 and float64 sums may put it on either side.
DRAW_MARGIN = 1e-4

#: One sample case's input: the logits, the sampler parameters, the draw's r.
Spec = tuple[dict[str, Any], dict[str, Any], float]


def model_windows(llama: Any, model: Any, windows: dict[str, Any]) -> dict[str, np.ndarray]:
    """Next-token logits after each window prompt of ``windows["model"]``, from llama.cpp's forward."""
    llm = llama.llama(model, vocab_only=False)
    out = {}
    for name, spec in windows["model"].items():
        ids = llm.tokenize(spec["prompt"].encode("utf-8"), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        out[name] = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
    return out


def compact(x: np.ndarray, keep: int) -> dict[str, Any]:
    """The ``keep`` highest logits of ``x`` (the rest become -inf); ties at the edge
    keep the lower ids."""
    finite = np.flatnonzero(np.isfinite(x))
    top = finite[np.argsort(-x[finite], kind="stable")][:keep]
    top = np.sort(top)
    return {"n_vocab": len(x), "ids": top.tolist(), "values": [float(v) for v in x[top]]}


def penalty_window(spec: list[Any], logits: np.ndarray) -> list[int]:
    """Crafted window → token ids: ranks in the logit window (0: the highest logit, ties
    by id), "out" (the first token the window excludes), "oov" (past the vocabulary)."""
    ranked = np.argsort(-logits, kind="stable")
    excluded = int(np.flatnonzero(~np.isfinite(logits))[0])
    table = {"out": excluded, "oov": len(logits) + 7}
    return [table[t] if isinstance(t, str) else int(ranked[t]) for t in spec]


def grid_cases(name: str, logits: dict[str, Any], grid: dict[str, Any]) -> dict[str, Spec]:
    """The window ``name``'s logits at every point of the parameter ``grid``
    (``<name>/<point>``; a point's ``r`` defaults to 0.5, its penalty window to none)."""
    x = sample_checks.logits_of({"logits": logits})
    out = {}
    for point, spec in grid["points"].items():
        params = {k: v for k, v in spec.items() if k not in ("r", "penalty_window")}
        params["window"] = penalty_window(grid["penalty_windows"][spec.get("penalty_window", "none")], x)
        out[f"{name}/{point}"] = (logits, params, float(spec.get("r", 0.5)))
    return out


def crafted_cases(windows: dict[str, Any]) -> dict[str, Spec]:
    """The crafted logit vectors of ``windows["crafted"]`` (``-inf`` entries left out of
    the ids) at their own points (``crafted-<name>/<point>``; no penalty window unless given)."""
    out = {}
    for name, spec in windows["crafted"].items():
        values = [float(v) for v in spec["logits"]]
        ids = [i for i, v in enumerate(values) if np.isfinite(v)]
        logits = {"n_vocab": len(values), "ids": ids, "values": [values[i] for i in ids]}
        for point, p in spec["points"].items():
            params = {k: v for k, v in p.items() if k != "r"}
            params.setdefault("window", [])
            out[f"crafted-{name}/{point}"] = (logits, params, float(p.get("r", 0.5)))
    return out


def reference_case(logits: dict[str, Any], params: dict[str, Any], r: float) -> dict[str, Any]:
    """One sample case: the documented chain's steps, candidates and draw (None within
    ``DRAW_MARGIN`` of a boundary), whether llama.cpp's own chain differs, and the
    tie-keeping top-k's answer where top-k cuts inside a tie."""
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


def sample_cases(
    inputs: dict[str, dict[str, Any]], grid: dict[str, Any], windows: dict[str, Any]
) -> dict[str, Any]:
    """Every sample case: each compacted window of ``inputs`` (name -> logits) over the
    ``grid``, and the crafted vectors of ``windows``, through ``reference_case``."""
    specs = {k: v for name, logits in inputs.items() for k, v in grid_cases(name, logits, grid).items()}
    specs.update(crafted_cases(windows))
    return {case_id: reference_case(*spec) for case_id, spec in specs.items()}

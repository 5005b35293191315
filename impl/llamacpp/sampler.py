"""llama.cpp's sampler chain on a given logit vector, read back after every step.

The candidate array (``llama_token_data_array``) is built from the logits, each
sampler is applied to it with ``llama_sampler_apply``, and the surviving
candidates are read back; llama.cpp's own ``dist`` sampler computes the
probabilities (its softmax), whose random draw is ignored. Nothing is drawn
with llama.cpp's RNG: the gate compares candidate sets and probabilities.

Two flavours:

* ``native`` — llama.cpp's samplers as they are (what ``--impl llamacpp`` is);
* ``documented`` — the documented chain expressed with llama.cpp's primitives,
  which is the reference the sample gate records:
    - penalties: frequency/presence first, then repeat. llama.cpp's penalties
      sampler applies repeat first, so it is run twice: (repeat 1, freq, presence)
      then (repeat, 0, 0);
    - top-p keeps tokens until the cumulative probability is *strictly greater*
      than p; llama.cpp stops at ``>= p``, so it is given the next float32 above p;
    - the greedy shortcut (temperature < 1e-6) is penalties then llama.cpp's
      ``greedy`` sampler.
  top-k cannot be expressed: the documented top-k keeps every token tied with
  the k-th, llama.cpp keeps exactly k. ``topk_tie`` reports when that matters.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np

from oracle.sampler import GREEDY_TEMPERATURE, resolve_params

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class Candidates:
    """A ``llama_token_data_array`` over a numpy buffer that outlives it."""

    def __init__(self, logits: np.ndarray) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.buf = np.zeros(len(logits), TOKEN_DATA)
        self.buf["id"] = np.arange(len(logits))
        self.buf["logit"] = logits
        self.array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self.buf.ctypes.data, llama_cpp.llama_token_data_p),
            size=len(logits),
            selected=-1,
            sorted=False,
        )

    def apply(self, smpl: Any) -> None:
        try:
            self._lib.llama_sampler_apply(smpl, ctypes.byref(self.array))
        finally:
            self._lib.llama_sampler_free(smpl)

    def read(self) -> np.ndarray:
        """The current candidates (the data pointer may have been moved by a sampler)."""
        raw = ctypes.string_at(self.array.data, self.array.size * TOKEN_DATA.itemsize)
        return np.frombuffer(raw, TOKEN_DATA).copy()

    def probabilities(self) -> tuple[list[int], list[float]]:
        """Candidates by descending probability (ties in id order), with the
        probabilities llama.cpp's ``dist`` sampler computes for them."""
        self.apply(self._lib.llama_sampler_init_dist(0))
        cur = self.read()
        cur = cur[np.isfinite(cur["logit"])]
        order = np.lexsort((cur["id"], -cur["p"]))
        return cur["id"][order].tolist(), cur["p"][order].astype(float).tolist()


def _penalties(n_vocab: int, p: Mapping[str, Any], repeat: float, freq: float, present: float) -> Any:
    import llama_cpp

    smpl = llama_cpp.llama_sampler_init_penalties(n_vocab, p["penalty_last_n"], repeat, freq, present)
    for token in p["window"]:
        llama_cpp.llama_sampler_accept(smpl, int(token))
    return smpl


def _samplers(step: str, n_vocab: int, p: Mapping[str, Any], documented: bool) -> list[Any]:
    import llama_cpp

    if step == "penalties":
        if documented:
            return [
                _penalties(n_vocab, p, 1.0, p["frequency_penalty"], p["presence_penalty"]),
                _penalties(n_vocab, p, p["repeat_penalty"], 0.0, 0.0),
            ]
        return [_penalties(n_vocab, p, p["repeat_penalty"], p["frequency_penalty"], p["presence_penalty"])]
    if step == "top_k":
        return [llama_cpp.llama_sampler_init_top_k(p["top_k"])]
    if step == "top_p":
        top = p["top_p"]
        if documented and 0.0 < top < 1.0:
            top = float(np.nextafter(np.float32(top), np.float32(2.0)))
        return [llama_cpp.llama_sampler_init_top_p(top, 1)]
    if step == "min_p":
        return [llama_cpp.llama_sampler_init_min_p(p["min_p"], 1)]
    if step == "temperature":
        return [llama_cpp.llama_sampler_init_temp(p["temperature"])]
    if step == "greedy":
        return [llama_cpp.llama_sampler_init_greedy()]
    raise ValueError(f"no llama.cpp sampler for chain step {step!r}")


def run_chain(logits: Any, params: Mapping[str, Any], documented: bool) -> dict[str, Any]:
    """The chain of ``params`` on ``logits`` through llama.cpp, in the result
    format of ``oracle.sampler.sample`` (without a draw: ``token`` is None)."""
    p = resolve_params(params)
    x = np.asarray(logits, dtype=np.float32)
    is_greedy = p["temperature"] < GREEDY_TEMPERATURE
    chain = [s for s in p["chain"] if s == "penalties"] + ["greedy"] if is_greedy else list(p["chain"])
    cands = Candidates(x)
    steps = []
    for step in chain:
        for smpl in _samplers(step, len(x), p, documented):
            cands.apply(smpl)
        if step == "greedy":
            chosen = int(cands.read()["id"][cands.array.selected])
            steps.append({"step": step, "ids": [chosen], "probs": [1.0]})
        else:
            ids, probs = cands.probabilities()
            steps.append({"step": step, "ids": ids, "probs": probs})
    last = steps[-1] if steps else dict(zip(("ids", "probs"), Candidates(x).probabilities(), strict=True))
    return {"chain": chain, "steps": steps, "ids": last["ids"], "probs": last["probs"], "token": None}


def topk_tie(logits: Any, params: Mapping[str, Any]) -> str | None:
    """Why the documented top-k differs from llama.cpp's for this input, or None:
    a token tied with the k-th candidate when top-k runs (llama.cpp keeps exactly
    k, in an unspecified order among the ties)."""
    p = resolve_params(params)
    if p["temperature"] < GREEDY_TEMPERATURE or "top_k" not in p["chain"]:
        return None
    k = p["top_k"]
    x = np.asarray(logits, dtype=np.float32)
    if k == 0 or k >= len(x):
        return None
    cands = Candidates(x)
    for step in p["chain"][: p["chain"].index("top_k")]:
        for smpl in _samplers(step, len(x), p, documented=True):
            cands.apply(smpl)
    import llama_cpp

    cands.apply(llama_cpp.llama_sampler_init_top_k(k + 1))
    cur = np.sort(cands.read()["logit"])[::-1]
    if len(cur) > k and np.isfinite(cur[k]) and cur[k] == cur[k - 1]:
        return (
            f"top-k={k}: the {k}-th and {k + 1}-th candidates tie at logit {float(cur[k])!r}; "
            "the documented top-k keeps every tied token, llama.cpp keeps exactly k"
        )
    return None

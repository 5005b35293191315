"""Confirmation: a divergence between the engine and the oracle is judged by the live
references of its stage before anything is reported.

Per reference, the engine's and the oracle's answers are each compared with the
reference's by the gate's own comparison (``specgate.run.triage.recheck`` with the
reference in the reference's seat). Then:

* every reference agrees with the oracle, none with the engine → ``engine-divergence``
  (the only verdict reported as an engine failure);
* every reference agrees with the engine, none with the oracle → ``oracle-bug``;
* anything else (references split, one agrees with neither or with both, one
  cannot judge this input) → ``reference-disagreement``; so is a split or encode
  input holding code points older Unicode data leaves unassigned, whoever the
  references side with (the tokenizer stage's Unicode-version-skew rule,
  ``specgate.checks.tokenizer.unicode_version_skew``);
* no reference of the stage can run here → ``unconfirmed``.

The judges: CPython ``regex`` for split, llama.cpp and HF tokenizers for encode, llama.cpp
for decode (HF decodes to ``str`` and cannot judge partial UTF-8), transformers for render and construct templates,
transformers' (exact) or llama.cpp's (quantized) greedy stream with the documented stop
rule applied for generate (``StopRuleReference``), llama.cpp's samplers in
the documented chain order for sample (which cannot judge a top-k tie: llama.cpp
keeps exactly k).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from impl.protocol import Engine, ModelRef
from specgate.checks.tokenizer import unicode_version_skew

ENGINE_DIVERGENCE = "engine-divergence"
ORACLE_BUG = "oracle-bug"
REFERENCE_DISAGREEMENT = "reference-disagreement"
UNCONFIRMED = "unconfirmed"


class DocumentedSampler(Engine):
    """llama.cpp's samplers run in the documented chain (``impl.llamacpp.sampler``,
    the sample snapshots' reference), with the documented draw on its final
    candidates (the sample gate's ``expected_draw``)."""

    name = "llamacpp-documented"
    is_reference = True

    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        from impl.llamacpp.sampler import run_chain
        from specgate.checks.sample import expected_draw

        result = run_chain(logits, params, documented=True)
        if result["chain"][-1:] == ["greedy"]:
            result["token"] = result["ids"][0]
        else:
            result["token"] = expected_draw(result["ids"], result["probs"], r)[0]
        return result


class StopRuleReference(Engine):
    """A reference's greedy stream with stop strings applied by the documented rule
    (PROTOCOL.md, as the recorded stop cases' known answers in
    ``tests/references/test_generate.py``): the references generate greedily without
    stop strings (neither llama.cpp's C API nor this transformers adapter matches them),
    so the stream they generate is cut after the first token whose bytes complete a stop
    string, where the earliest-starting stop string present then begins."""

    is_reference = True

    def __init__(self, reference: Engine) -> None:
        self.reference = reference
        self.name = f"{reference.name}+stop-rule"

    def generate(self, model: Any, ids: Any, params: dict[str, Any]) -> dict[str, Any]:
        stops = [s.encode("utf-8") for s in params.get("stop", []) if s]
        result = self.reference.generate(model, ids, {k: v for k, v in params.items() if k != "stop"})
        stream = b""
        for n, token in enumerate(result["ids"]):
            stream += self.reference.decode(model, [token])
            starts = [i for s in stops if (i := stream.find(s)) >= 0]
            if starts:
                cut = stream[: min(starts)]
                return {
                    **result,
                    "ids": result["ids"][: n + 1],
                    "bytes": cut.hex(),
                    "text": cut.decode("utf-8", "replace"),
                    "finish_reason": "stop_string",
                    "steps": result["steps"][: n + 1],
                }
        return result


@dataclass
class Confirmation:
    verdict: str
    judges: dict[str, str] = field(default_factory=dict)  # reference -> what it agrees with, or why not

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "judges": self.judges}


class References:
    """The live references, built on first use and kept for the session; a reference
    that cannot be imported or loaded is unavailable, with the reason."""

    def __init__(self, names: dict[str, Engine] | None = None) -> None:
        self._engines: dict[str, Engine | str] = dict(names or {})

    def get(self, name: str) -> Engine | str:
        """The reference engine, or a one-line reason it is unavailable."""
        if name not in self._engines:
            self._engines[name] = _build(name)
        return self._engines[name]

    def close(self) -> None:
        for engine in self._engines.values():
            if isinstance(engine, Engine):
                engine.close()


_MODULES = {"regex": "regex", "llamacpp": "llama_cpp", "hf": "transformers"}


def _build(name: str) -> Engine | str:
    import importlib

    try:
        importlib.import_module(_MODULES[name])
    except ImportError as exc:
        return f"{name} is not installed ({exc})"
    if name == "llamacpp":
        from impl.llamacpp.engine import LlamaCppEngine

        return LlamaCppEngine()
    if name == "hf":
        from impl.hf.engine import HFEngine

        return HFEngine()
    from impl.text.engines import RegexSplitter

    return RegexSplitter()


def confirm(
    stage: Any, model: ModelRef | None, inp: dict[str, Any], engine: Engine, oracle: Engine, refs: References
) -> Confirmation:
    """The references' verdict on one diverging input (see the module docstring)."""
    from specgate.run.triage import recheck

    judges: dict[str, str] = {}
    sides: list[tuple[bool, bool]] = []
    for name in stage.judges:
        reference = refs.get(name)
        if isinstance(reference, str):
            judges[name] = f"unavailable: {reference}"
            continue
        if stage.gate_stage == "sample":
            reason = _sample_unjudgeable(inp)
            if reason:
                judges[name] = f"cannot judge: {reason}"
                sides.append((False, False))
                continue
            reference = DocumentedSampler()
        if stage.gate_stage.startswith("generate/"):
            reference = StopRuleReference(reference)
        try:
            with_oracle = recheck(stage.gate_stage, oracle, reference, model, inp)
            with_engine = recheck(stage.gate_stage, engine, reference, model, inp)
        except Exception as exc:  # a reference that cannot answer this input cannot judge it
            judges[name] = (
                f"cannot judge: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
            sides.append((False, False))
            continue
        agrees = (with_oracle.outcome == "pass", with_engine.outcome == "pass")
        sides.append(agrees)
        judges[name] = {
            (True, False): "agrees with the oracle",
            (False, True): "agrees with the engine",
            (True, True): "agrees with both",
            (
                False,
                False,
            ): f"agrees with neither (vs oracle: {with_oracle.message.splitlines()[0][:200] if with_oracle.message else with_oracle.outcome})",
        }[agrees]
    if not sides:
        return Confirmation(UNCONFIRMED, judges)
    if stage.gate_stage in ("split", "encode") and (skew := unicode_version_skew(inp["text"])):
        judges["unicode"] = skew  # the tokenizer stage's one rule: both sides may be right
        return Confirmation(REFERENCE_DISAGREEMENT, judges)
    if all(s == (True, False) for s in sides):
        return Confirmation(ENGINE_DIVERGENCE, judges)
    if all(s == (False, True) for s in sides):
        return Confirmation(ORACLE_BUG, judges)
    return Confirmation(REFERENCE_DISAGREEMENT, judges)


def _sample_unjudgeable(inp: dict[str, Any]) -> str | None:
    from impl.llamacpp.sampler import topk_tie
    from specgate.checks.sample import logits_of

    return topk_tie(logits_of(inp), inp["params"])

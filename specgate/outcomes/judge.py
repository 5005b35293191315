"""Which reference an engine's answer matches: every case is asked, the primary
reference decides.

Each stage has one *primary* reference (PROTOCOL.md, section 8): its answer is the
snapshot case's own. A case the references disagree on carries ``disagreement`` (why)
and ``sources`` (each other reference's answer, by name). The engine is asked every
case all the same, and its answer is judged by ``judge``:

* it matches the primary reference — **pass**;
* it matches only another reference — **reference-disagreement**, naming the
  reference it matched and why the references disagree;
* it matches none — **fail**, with the first divergence from the primary reference.

So an engine can neither hide a defect behind a case the references disagree on nor
be failed for following a reference the primary one disagrees with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specgate.outcomes.gate import fail_if, reference_disagreement

#: The primary reference of each gate stage (the snapshot's own answer), as the
#: reference names used in a case's ``sources``.
PRIMARY = {
    "metadata": "llamacpp",
    "render": "transformers",
    "template": "transformers",
    "split": "regex",
    "encode": "llamacpp",
    "decode": "llamacpp",
    "logits": "transformers",  # the exact class; the quantized class is llama.cpp's (own rows)
    "sample": "llamacpp",
    "generate": "transformers",
}

#: What each reference is, for messages.
DESCRIBED = {
    "llamacpp": "llama.cpp",
    "transformers": "transformers",
    "hf": "HF tokenizers",
    "regex": "CPython regex",
    "tiktoken": "tiktoken",
    "regex-split": "llama.cpp's merges over CPython regex's pre-tokenizer split",
    "documented-top-k": "PROTOCOL.md 4.4's top-k keeping every token tied with the k-th (llama.cpp's samplers)",
}


def described(name: str) -> str:
    return DESCRIBED.get(name, name)


def alternatives(stage: str, case: Mapping[str, Any], answer_key: str | None) -> dict[str, Mapping[str, Any]]:
    """The case as each non-primary reference answered it (``sources``, the primary's
    own entry left out): ``answer_key`` replaced by that reference's answer, or, for a
    stage whose answer spans several keys (``answer_key`` None), those keys overlaid."""
    out = {}
    for name, answer in (case.get("sources") or {}).items():
        if name == PRIMARY[stage]:
            continue
        out[name] = {**case, answer_key: answer} if answer_key is not None else {**case, **answer}
    return out


def judge(
    stage: str,
    case: Mapping[str, Any],
    check: Callable[[Mapping[str, Any]], str | None],
    answer_key: str | None,
) -> tuple[str | None, str | None]:
    """``(failure, disagreement)`` for an answer that ``check`` compares with a case
    (``check(case)`` is None when the answer matches that case's reference answer).
    At most one of the two is set; both None is a pass."""
    failure = check(case)
    if failure is None:
        return None, None
    if "disagreement" not in case:
        return failure, None
    primary = described(PRIMARY[stage])
    others = alternatives(stage, case, answer_key)
    for name, alternative in others.items():
        if check(alternative) is None:
            return None, (
                f"the engine matches {described(name)} ({name}), not {primary}, the primary reference of "
                f"{stage}: {case['disagreement']}"
            )
    named = (
        f"nor {', '.join(described(n) for n in others)}"
        if others
        else "and no other reference's answer is recorded"
    )
    return (
        f"{failure}\n  (the references disagree on this case — {case['disagreement']} — but the engine "
        f"matches none of them: not {primary}, the primary reference, {named})"
    ), None


def settle(
    stage: str,
    case: Mapping[str, Any],
    check: Callable[[Mapping[str, Any]], str | None],
    where: str,
    answer_key: str | None,
) -> None:
    """A gate's outcome from ``judge``: return on a pass, raise the disagreement or fail."""
    failure, disagreement = judge(stage, case, check, answer_key)
    if disagreement is not None:
        reference_disagreement(disagreement)
    fail_if(failure, where)

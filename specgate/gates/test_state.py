"""State gates: what the engine keeps between requests — its sessions (PROTOCOL.md 4.7).
``state_incremental``: a prompt appended in chunks (one token at a time, uneven, whole)
must give the one-shot logits at its last position; ``state_conversation``: a
multi-turn conversation, each turn appending only what the incremental render adds and
truncating the KV a template drift or a seam makes stale, must give after every turn a
fresh prefill's logits of the whole render; ``state_reuse``: two sessions over branches
sharing a prefix (one opened after the other is closed, side by side, in turns, cut back
to the prefix) must give at every judged point a fresh prefill's logits of what that
session holds; ``state_generate``: a prompt's generation from a session must be the
same cold, warm (a second session after the first was closed) and again (after a
truncate back to the prompt), the session holding what was emitted, and a greedy
stream the reference's; ``state_chat``: the same conversations through an engine that
renders and caches itself (capability ``conversation``: each turn's messages sent, the
ids its cache holds answered) must hold after every turn the whole render's
tokenization — a seam or a drift kept named when not — and give a fresh prefill's logits
of it. All are judged in the logits stage's
classes (``exact``, ``quantized``); an engine without the ``session`` (``conversation``)
capability is n/a.
The playing and the comparison are in ``specgate.checks.state``; each case is played
once, whichever classes read it. The class's metrics at their worst over the case's judged
points are reported beside the verdict. A row of named log-probabilities (an engine naming
only some candidates) that names nothing judgeable at some point refuses the case (never a
pass on nothing)."""

import pytest

from specgate.checks import state as checks
from specgate.outcomes.gate import claims, fail_if


@pytest.mark.gate("state_incremental")
def test_state_incremental(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    chunks = "+".join(map(str, case["chunks"][:12])) + ("+…" if len(case["chunks"]) > 12 else "")
    what = f"prompt {case_id} ({len(case['ids'])} tokens appended as {chunks})"
    args = (request, engine, specgate, model, model_id, case_id, case, conformance_class)
    checks.gate_rows(*args, "state_incremental", what)


@pytest.mark.gate("state_conversation")
def test_state_conversation(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    what = f"conversation {case_id} ({len(case['turns'])} turns, {case['shape']})"
    args = (request, engine, specgate, model, model_id, case_id, case, conformance_class)
    checks.gate_rows(*args, "state_conversation", what)


@pytest.mark.gate("state_reuse")
def test_state_reuse(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    args = (request, engine, specgate, model, model_id, case_id, case, conformance_class)
    checks.gate_rows(*args, "state_reuse", f"case {case_id} ({case['shape']})")


@pytest.mark.gate("state_generate")
def test_state_generate(engine, specgate, model, model_id, case_id, case, conformance_class):
    label = f"[state_generate/{conformance_class}] model {model_id}, case {case_id} ({len(case['prompt'])}-token prompt)"
    claims(engine, "session", conformance_class)
    got = specgate.answers.get(
        ("state_generate", model.id, case_id), lambda: checks.play_generate(engine, model, case)
    )
    fail_if(checks.judge_generate(conformance_class, model_id, case, got), label)


@pytest.mark.gate("state_batch")
def test_state_batch(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    lengths = ", ".join(map(str, (len(p) for p in case["prompts"])))
    args = (request, engine, specgate, model, model_id, case_id, case, conformance_class)
    checks.gate_rows(*args, "state_batch", f"batch {case_id} (prompts of {lengths} tokens)")


@pytest.mark.gate("state_chat")
def test_state_chat(engine, specgate, model, model_id, case_id, case, conformance_class, request):
    what = f"conversation {case_id} ({len(case['turns'])} turns, {case['shape']})"
    args = (request, engine, specgate, model, model_id, case_id, case, conformance_class)
    checks.gate_rows(*args, "state_chat", what)

"""Diagnoses: findings that name their cause.

An engine that fails a gate usually has one of a handful of classic defects: it
NFC-normalizes, it parses special tokens in plain text, it decodes through a string.
specgate holds a reference it can perturb: the oracle, which agrees with the
references on the whole corpus. Each *hypothesis* of the catalogue is one known
deviation applied to it (``tokenizer.py``: the tokenizer stages; ``render.py``: the
chat-template environment and what a template is handed; ``forward.py``: the forward
pass, for logits — there "the engine's answer" means within the case's conformance class;
``sampler.py``: the sampler chain's order and steps; ``generate.py``: the decode loop's
stop and stream steps; ``state.py``: the sessions' KV cache — a truncate kept, sessions
sharing one KV, positions after an append, the chunk boundary). After a run, the
failing cases of each (stage, model) row are put to the engine again and to every
hypothesis of that stage (``run.py``); a hypothesis is a *diagnosis* only for the
cases on which the deviated oracle gives exactly the engine's answer (and not the
reference's). Rows are explained greedily, the hypothesis that explains the most
remaining cases first, so a look-alike (NFC where the engine does NFKC) never takes
cases the better explanation reproduces too. What no hypothesis reproduces stays
grouped by its message signature (``specgate.run.triage``).
"""

"""Differential search (``specgate search``, ``nox -s search``): inputs generated per
stage, run through an engine and the live oracle side by side; each divergence
minimized, confirmed by the live references, grouped by root cause and kept as a
reproducer.

| module | what |
|---|---|
| ``texts`` | texts for split/encode, id lists for decode |
| ``conversations`` | conversations (tools, reasoning, documents, kwargs) for render |
| ``templates`` | small construct templates for render_template |
| ``sampler`` | sampler parameters and logit windows for sample |
| ``generation`` | prompts, greedy parameters and token-straddling stop strings for generate |
| ``stages`` | per stage: strategy, default models, gate stage, judges |
| ``run`` | the hypothesis rounds of one stage (seeded, budgeted, resumable) |
| ``minimize`` | triage's ddmin after hypothesis' shrinking |
| ``confirm`` | the references' verdict: engine divergence, oracle bug, reference disagreement, unconfirmed |
| ``session`` | a whole search: plan, search, minimize, confirm |
| ``report`` | Markdown/JSON report and reproducers (``specgate repro`` format) |
| ``corpus`` | ``--save-to corpus``: a reproducer as a regular corpus case |
"""

"""How a gate run on several pytest-xdist workers shares out its cases.

xdist's default (``--dist load``) hands out the collected items in long consecutive
chunks at the start: the gate cases run model by model (``selection.group_by_model``), so
one worker received the whole block of the 0.5B model — nearly all the forward work —
while the other ran the tokenizer and tiny-model cases and then sat idle. Work stealing
(``--dist worksteal``) evens the load but splits a case's two conformance classes, and a
generate prompt's cases, across workers, so each worker computes answers that ``logits``
and ``generate`` otherwise compute once for both (the 0.5B model's cases: 47 s of work
became 64 s). One case per unit keeps the pairs but puts both workers on the 0.5B model
at once, where its one-token steps share the memory bandwidth (its 2 GB of float32
weights read per step).

``StageScheduling`` hands out one unit per stage and model (``stage_scope``: every case
and class of one gate function on one model; a model's state stages one unit,
``SHARED_UNITS``), in the run's order — model by model, the
largest first — not xdist's order by unit size: each unit's shared answers are computed
once, the 0.5B model's units go to whichever worker is free, and the other worker runs
the light units beside them. The main job gating the oracle on 2 cores, one sitting
(09:00, load 1.5-2), the gate run's wall time: ``load`` 53.8 s (one worker idle from
26 s), ``worksteal`` 49.2 and 50.4 s, one case per unit 53.8 / 51.3 / 54.0 s, a stage and
model per unit in size order 58.6 s, in the run's order 49.7 s (workers done at 47 and 43 s).

Used for ``--dist load`` (xdist's default with ``-n``); another ``--dist`` the user names
is left as it is. The workers share the cores between their BLAS threads (``blas_threads``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Gate functions whose units of one model are one unit (the prefix names it): the state
#: stages play the same renders — a conversation's turns in ``state_conversation`` and
#: ``state_chat``, their branches in ``state_reuse``, the first renders in
#: ``state_generate`` and ``state_batch`` — and the oracle keeps what an append computed for
#: its process (``impl.append_memo``), so on one worker each is computed once. The state
#: stages of the 0.5B model played in one process: 28.2 s of forward passes, against 32.5 s
#: one stage per process.
SHARED_UNITS = ("test_state_",)


def stage_scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its gate function and model
    (``…/test_logits.py::test_logits[qwen2.5-coder-0.5b-instruct``), whatever its case and
    conformance class — the state gate functions of one model together
    (``…/test_state.py::test_state_*[tiny-qwen2-f32``: ``SHARED_UNITS``); a test without
    parameters is a unit of its own."""
    head, bracket, params = nodeid.partition("[")
    if not bracket:
        return nodeid
    module, _, function = head.rpartition("::")
    for prefix in SHARED_UNITS:
        if function.startswith(prefix):
            head = f"{module}::{prefix}*"
    return head + bracket + params.split("/")[0]


def make_scheduler(config: Any, log: Any) -> Any:
    """The scheduler for xdist's ``--dist load``, None (xdist's own) for any other ``--dist``."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class StageScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return stage_scope(nodeid)

    config.option.loadscopereorder = False  # the run's order (heaviest model first), not unit size
    return StageScheduling(config, log)


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads(workers: int, cpus: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The BLAS thread counts ``workers`` xdist workers start with on ``cpus`` cores:
    ``cpus // workers`` each (at least one), unless the caller's environment sets them (its
    choice stays). A worker's BLAS otherwise starts a thread per core: ``specgate parity
    -n 2`` gating the oracle on this 2-core machine (quiet, 2026-12-07) took 88 s, against
    38.5 s with one thread per worker (each worker's products spin on the core the other
    holds). The workers' engines inherit the same counts."""
    if workers < 2:
        return {}
    threads = str(max(1, cpus // workers))
    return {name: threads for name in BLAS_THREAD_VARIABLES if name not in environ}

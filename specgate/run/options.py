"""specgate's command-line options, and what pytest's own ``--strict`` means to it."""

from __future__ import annotations

import os
from typing import Any

import pytest

from specgate.stages import GATE_STAGES


def add_options(parser: pytest.Parser) -> None:
    """specgate's command-line options (the ``specgate`` group)."""
    group = parser.getgroup("specgate")
    group.addoption(
        "--impl",
        default=os.environ.get("SPECGATE_IMPL", "oracle"),
        help="engine under test: oracle | hf | llamacpp | cmd:<command> | http:<url> | module:Class",
    )
    group.addoption(
        "--model",
        action="append",
        default=[],
        help="manifest id or path to a GGUF (repeatable); default: every model the snapshots define",
    )
    group.addoption(
        "--models", default="", help="comma-separated manifest ids or GGUF paths (same as repeating --model)"
    )
    group.addoption(
        "--stages",
        default="",
        help=f"comma-separated stages to gate (default: all): {', '.join(GATE_STAGES)}; "
        "logits, generate and trace also as <stage>/exact or <stage>/quantized",
    )
    group.addoption(
        "--live-references",
        action="store_true",
        help="also check against live references (transformers, llama.cpp, tiktoken)",
    )
    group.addoption(
        "--reference-models",
        default="",
        metavar="ID,ID",
        help="run the tests taking a model with weights (forward_model_id: the logits and trace "
        "references' re-check, the tiny models' regeneration) for these models only, of those "
        "selected (default: every selected model with weights; the live tier's sample: "
        "noxfile.LIVE_REFERENCE_SAMPLE)",
    )
    group.addoption("--report-dir", default="reports", help="where parity reports are written")
    group.addoption(
        "--report-name",
        default="",
        help="NAME: the report files' stem is made from NAME instead of --impl (e.g. a server's "
        "engine name, so a loopback port never names a file)",
    )
    group.addoption(
        "--shard",
        default="",
        help="I/N: run only shard I of N of the gate cases (cost-balanced; specgate report merge joins them)",
    )
    group.addoption(
        "--max-cases",
        type=int,
        default=0,
        help="N: gate at most N cases per stage and model, spread evenly over the snapshot's cases "
        "(deterministic; the ecosystem CI sample). 0: all",
    )
    group.addoption(
        "--parity-junit",
        action="store_true",
        help="also write the JUnit XML into --report-dir, named like the other report files",
    )
    group.addoption(
        "--shrink-budget",
        type=float,
        default=120.0,
        help="seconds spent in total shrinking the failing groups' reproducers after the run "
        "(0: no reproducers; default 120)",
    )
    group.addoption(
        "--diagnose-budget",
        type=float,
        default=300.0,  # specgate.diagnose.diagnoser.DEFAULT_BUDGET: a busy 2-core machine's 4-model run, x3
        help="seconds spent in total after the run putting failing tokenizer cases to the engine again and "
        "to the diagnosis catalogue's hypotheses, to name their causes (0: no diagnoses; default 300)",
    )
    group.addoption(
        "--shrink-group-budget", type=float, default=20.0, help="seconds of shrinking per group (default 20)"
    )
    add_snapshot_dir_option(group)
    group.addoption(
        "--record-references",
        action="store_true",
        help="record the reference snapshots from the live references (tests/references) instead of re-checking "
        "them (nox -s snapshots; syrupy's --snapshot-update updates the suite's own layout snapshots)",
    )


def add_snapshot_dir_option(group: Any) -> None:
    """``--snapshot-dir DIR``: the snapshots of this run live in DIR instead of the
    repository's ``snapshots/`` — how a user's own GGUF is recorded (``nox -s snapshots
    -- --model PATH --snapshot-dir DIR``) and gated (``nox -s parity`` with the same two)."""
    group.addoption(
        "--snapshot-dir",
        default=None,
        help="read (and, under --record-references, write) the reference snapshots in this directory "
        "instead of the repository's snapshots/ (for your own GGUF)",
    )


def strict_mode(config: pytest.Config) -> bool:
    """pytest's own ``--strict`` ("be strict") is specgate's too: every refusal fails.
    (pytest 9 sets the ``strict`` ini option; pytest 8 stores the flag.)"""
    try:
        if config.getini("strict") in (True, "true", "True", "1"):
            return True
    except ValueError:  # pytest 8 has no such ini option
        pass
    return bool(getattr(config.option, "strict", False))

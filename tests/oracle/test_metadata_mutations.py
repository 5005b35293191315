"""Mutation evidence for the metadata gate: each planted dispatch defect makes the gate
(the very test function ``nox -s parity`` runs) fail on the real 0.5B model."""

from __future__ import annotations

import dataclasses

import pytest

import impl.oracle
import oracle.dispatch as dispatch_mod
from impl.loaded import PerModel
from impl.oracle import OracleEngine
from specgate.checks.metadata import check_field
from specgate.supply.models import model_ref

MODEL = "qwen2.5-coder-0.5b-instruct"


def _hparams_replace(**changes):
    real = dispatch_mod._hparams

    def mutated(gguf, arch, n_vocab):
        return dataclasses.replace(real(gguf, arch, n_vocab), **changes)

    return mutated


def _no_im_start(real=dispatch_mod._special):
    def mutated(gguf, tokens):
        return dataclasses.replace(real(gguf, tokens), im_start=None)

    return mutated


MUTATIONS = {
    "rope base defaulted to 10000": ("_hparams", _hparams_replace(rope_base=10000.0), "hparams.rope_base"),
    "kv heads read as query heads": ("_hparams", _hparams_replace(n_head_kv=14), "hparams.n_head_kv"),
    "tied embeddings inverted": (
        "_hparams",
        _hparams_replace(tied_embeddings=True),
        "hparams.tied_embeddings",
    ),
    "<|im_start|> not looked up": ("_special", _no_im_start(), "special.im_start"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_metadata_gate_catches(specgate, monkeypatch, mutation):
    attr, broken, field = MUTATIONS[mutation]
    model = model_ref(MODEL)
    specgate.snapshot_cases(model, "metadata")  # the snapshot must exist for the gate to judge
    case = specgate.snapshot_cases(model, "metadata")[field]
    assert check_field(OracleEngine().metadata(model), field, case) is None  # the real dispatch passes
    monkeypatch.setattr(dispatch_mod, attr, broken)
    # as in a new engine process: the file parsed again, its spec read with the defect (a
    # parsed file keeps the spec it first read, ``GGUFFile.derived``)
    monkeypatch.setattr(impl.oracle, "_ggufs", PerModel(limit=4))
    problem = check_field(OracleEngine().metadata(model), field, case)
    assert problem is not None and problem.startswith("engine says"), problem

"""Record the dispatch references: transformers' GGUF config conversion and llama.cpp's
reported model parameters, field by field, on every cached model (the cases:
``specgate.stages.metadata.metadata_cases``)."""

from __future__ import annotations

import pytest

from specgate.stages import STAGES
from specgate.supply.models import has_weights
from specgate.upkeep import snapshots

pytestmark = pytest.mark.live


def hparams_of_its_own(model_id: str) -> bool:
    """Every model but the tiny ones in other types than f32 (the same hyper-parameters as
    their family's f32 model, which is recorded)."""
    return not model_id.startswith("tiny-") or model_id.endswith("-f32")


@pytest.mark.applies_to.with_args(hparams_of_its_own)
def test_record_metadata(request, reference, model_id, model):
    hf, llama = reference("hf"), reference("llamacpp")
    readings = {"llamacpp": llama.metadata(model)}
    if model.extra.get("hparams", has_weights(model)):
        readings["transformers"] = hf.metadata(model)
    snapshots.record(
        request,
        llama,
        model,
        "metadata",
        STAGES["metadata"].build(readings),
        references={
            "transformers": "load_gguf_checkpoint config",
            "llamacpp": "llama_model_n_* / llama_vocab_*",
        },
        packages=("transformers", "llama-cpp-python", "gguf"),
    )

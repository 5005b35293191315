"""The model a recorded case or a reproducer names, by its id: a manifest or tiny id, a
path to a GGUF, or one of the pseudo ids (the sampler's, the construct templates')."""

from __future__ import annotations

from typing import Any

from specgate.supply import models
from specgate.upkeep import corpus

#: Pseudo model ids: the sampler's cases have no model, the construct templates' are a corpus.
SAMPLER_MODEL = "sampler"
CONSTRUCTS_MODEL = corpus.CONSTRUCTS_MODEL_ID


def model_for(model_id: str) -> Any:
    """The ``ModelRef`` a reproducer's (or a recorded case's) model id names: the construct
    templates' pseudo model, None for the sampler, else a manifest/tiny id or a GGUF path."""
    if model_id == CONSTRUCTS_MODEL:
        return corpus.constructs_model()
    if model_id == SAMPLER_MODEL:
        return None
    return models.model_ref(model_id)

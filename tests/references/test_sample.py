"""Record the sample reference: llama.cpp's sampler chain, step by step, on logit
windows of each full-weights model and on crafted logit vectors, over the
parameter grid of corpus/sampler/.

The reference is the *documented* chain built from llama.cpp's samplers
(``impl.llamacpp.sampler``, flavour ``documented``). Each case also says whether
llama.cpp's own samplers (``native``) give a different result, and why — that
is the report of where the documented chain and llama.cpp's defaults differ.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.checks import sample as sample_checks
from specgate.run.selection import has_weights
from specgate.stages import STAGES
from specgate.stages.sample_cases import compact, model_windows
from specgate.supply.models import is_known_id, load_manifest
from specgate.upkeep import snapshots

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.live

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "sampler"
GRID = tomllib.loads((CORPUS / "grid.toml").read_text(encoding="utf-8"))
WINDOWS = tomllib.loads((CORPUS / "windows.toml").read_text(encoding="utf-8"))


def recorded_here(model_id: str, model_of) -> bool:
    """This stage's recorded models, and a user's own GGUF, when they have weights."""
    listed = model_id in WINDOWS["models"] or not is_known_id(model_id)
    return listed and has_weights(model_id, load_manifest(), model_of)


@pytest.mark.applies_to.with_args(recorded_here, models=True)
def test_record_sample(request, reference, model_id, model):
    llama = reference("llamacpp")
    if snapshots.recording(request):
        inputs = {
            name: compact(x, WINDOWS["keep"]) for name, x in model_windows(llama, model, WINDOWS).items()
        }
    else:
        root = snapshots.root_of(request.config)
        inputs = sample_checks.stored_windows(snapshots.load(model, "sample", root))
        live = model_windows(llama, model, WINDOWS)
        drifted = [
            why for name, x in live.items() if (why := sample_checks.window_drift(name, inputs.get(name), x))
        ]
        assert not drifted, (
            f"{model.id}/sample: {drifted[0]}\nregenerate with: {snapshots.regenerate_command(model, root)}"
        )
    cases = STAGES["sample"].build(inputs, GRID, WINDOWS)
    snapshots.record(
        request,
        llama,
        model,
        "sample",
        cases,
        references={
            "llamacpp": "llama_sampler_apply of penalties/top_k/top_p/min_p/temp/greedy, dist softmax, "
            "on next-token logits from llama.cpp's forward (documented chain order)"
        },
        packages=("llama-cpp-python",),
    )

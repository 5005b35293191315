"""The gates' own pytest configuration, loaded wherever they run (``specgate parity``
from an installed package, or pytest on ``specgate/gates`` in a checkout)."""

import pytest

from specgate.gates import release_forward_weights
from specgate.run.selection import model_of


@pytest.fixture(autouse=True)
def _forward_weights_live_one_model(specgate, request):
    """The forward weights go when the gates move on to another model
    (``release_forward_weights``): the plugin runs the gate cases model by model."""
    model_id = model_of(request.node)
    if model_id != specgate.weights_model:
        if specgate.weights_model is not None:
            release_forward_weights(specgate)
        specgate.weights_model = model_id

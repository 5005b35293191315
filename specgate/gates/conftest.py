"""The gates' own pytest configuration, loaded wherever they run (``specgate parity``
from an installed package, or pytest on ``specgate/gates`` in a checkout)."""

import pytest

from specgate.gates import release_forward_weights


@pytest.fixture(autouse=True, scope="module")
def _forward_weights_live_one_module(specgate):
    """The forward weights go after each gate module (``release_forward_weights``)."""
    yield
    release_forward_weights(specgate)

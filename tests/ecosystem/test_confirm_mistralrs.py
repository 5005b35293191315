"""The mistral.rs divergences of impl/ecosystem/mistralrs/confirm.py still reproduce with the
pinned package, through mistral.rs's own Python API on the 0.5B model (its decode of a piece
inside a UTF-8 character and of the [PAD] fillers; a stop string completed by the last
allowed token is no stop)."""

import importlib.util

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, confirm_on_the_real_model, engine_unavailable

pytestmark = pytest.mark.live  # mistral.rs loads the 0.5B model's weights (~1-2 min, ~1.4 GB)


def test_mistralrs_divergences_reproduce():
    if importlib.util.find_spec("mistralrs") is None:
        engine_unavailable("the mistralrs package is not installed (pip install mistralrs==0.9.5)")
    lines = confirm_on_the_real_model("mistralrs")
    assert len(lines) == 5 and all(line.startswith("REPRODUCES") for line in lines), lines
    assert_entries_reproduce("mistralrs", "\n".join(lines))

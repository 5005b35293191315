"""Fixtures shared by the project's own tests (the gates' fixtures are the plugin's)."""

from __future__ import annotations

import pytest

from tests.light_install import LightInstall, build


@pytest.fixture(scope="module")
def tiny_model(request: pytest.FixtureRequest):
    """The test module's ``MODEL``, a tiny model of the specgate cache (skipped, saying how
    to make it, when it was not generated)."""
    from specgate.plugin import model_missing
    from specgate.supply import models as model_cache
    from specgate.upkeep.model_ids import model_for

    model_id = request.module.MODEL
    if model_id not in model_cache.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    return model_for(model_id)


@pytest.fixture(scope="session")
def light_install(tmp_path_factory: pytest.TempPathFactory) -> LightInstall:
    """The wheel of this checkout in a fresh light virtualenv, built once per session."""
    return build(tmp_path_factory.mktemp("light-install"))

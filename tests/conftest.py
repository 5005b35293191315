"""Fixtures shared by the project's own tests (the gates' fixtures are the plugin's)."""

from __future__ import annotations

import pytest

from tests.light_install import LightInstall, build


@pytest.fixture(scope="session")
def light_install(tmp_path_factory: pytest.TempPathFactory) -> LightInstall:
    """The wheel of this checkout in a fresh light virtualenv, built once per session."""
    return build(tmp_path_factory.mktemp("light-install"))

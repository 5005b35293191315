"""Top-level pytest configuration: the specgate plugin (options --impl, --model,
--stages, --live-references; the parity matrix) and the hypothesis profiles."""

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["specgate.plugin"]

# CI's profile runs the property tests at full strength; `dev` is for quick local loops.
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

"""Top-level pytest configuration: the specgate plugin (options --impl, --model,
--stages, --live-references; the parity matrix), the hypothesis profiles and the
session's peak-memory line."""

import argparse
import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from specgate.gates import release_forward_weights
from specgate.upkeep.snapshots import old_record_spelling
from tests.memory_profile import PeakMemoryProfile

pytest_plugins = ["specgate.plugin"]

# CI's profile runs the property tests at full strength; `dev` is for quick local loops.
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser, pluginmanager):
    """``--snapshot-update`` is syrupy's (the suite's own layout snapshots, ``__snapshots__/``);
    where syrupy will not load the old spelling of ``--record-references`` still parses, to
    be refused with one line below rather than as an unknown argument. (This conftest may
    load before the installed plugins, with ``-p conftest``: syrupy is then still to come.)"""
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    coming = autoload and not pluginmanager.is_blocked("syrupy") and importlib.util.find_spec("syrupy")
    if not (pluginmanager.has_plugin("syrupy") or coming):
        parser.addoption(
            "--snapshot-update", action="store_true", dest="update_snapshots", help=argparse.SUPPRESS
        )


def pytest_configure(config):
    if config.getoption("update_snapshots", False):
        here = config.invocation_params.dir
        paths = [(here / arg.split("::", 1)[0]).resolve() for arg in config.args]
        recorders = (Path(__file__).parent / "tests" / "references").resolve()
        problem = old_record_spelling(paths, recorders, config.pluginmanager.has_plugin("syrupy"))
        if problem:
            raise pytest.UsageError(problem)
    worker = hasattr(config, "workerinput")  # a pytest-xdist worker
    config.pluginmanager.register(PeakMemoryProfile(sample_tree=not worker), "specgate-peak-memory")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in config.pluginmanager.get_plugin("specgate-peak-memory").lines():
        terminalreporter.write_line(line)


#: The gate stages that run the forward pass (a prefix ends with ``_``). Their cases on a real
#: model are the slow tier's: the 0.5B's 90 forward cases took 77 of the fast tier's ~880
#: worker-seconds (2 workers, 2026-12-07). The fast tier gates those stages on the tiny
#: models; ``nox -s live`` (CI) and the main job, ``nox -s parity``, gate every model.
FORWARD_GATE_STAGES = ("logits", "generate", "trace", "state_")


def is_real_model_forward_case(item) -> bool:
    gate = item.get_closest_marker("gate")
    callspec = getattr(item, "callspec", None)
    if gate is None or not gate.args or callspec is None:
        return False
    stage, model_id = str(gate.args[0]), str(callspec.params.get("model_id", ""))
    forward = any(stage == s or (s.endswith("_") and stage.startswith(s)) for s in FORWARD_GATE_STAGES)
    return forward and bool(model_id) and not model_id.startswith("tiny-")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test that asks for a live reference is in the ``live`` tier (``nox -s live``),
    marked here so that no such test can be left out of both tiers by a forgotten marker; a
    real model's forward gate case is in the slow tier (``FORWARD_GATE_STAGES``)."""
    for item in items:
        if "reference" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
        if is_real_model_forward_case(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="module")
def _forward_weights_live_one_module(specgate):
    """Forward weights are dropped after each test module, as after each gate module
    (``specgate.gates.release_forward_weights``)."""
    yield
    release_forward_weights(specgate)

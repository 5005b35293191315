"""The pytest side of specgate: options, shared fixtures, and the parity matrix.

Loaded from the project's top-level ``conftest.py``. Gate tests carry
``@pytest.mark.gate("<stage>")`` and take a ``model_id`` parameter; their outcomes
are classified (see ``specgate.gate``) into the stage × model matrix printed at the
end of the run and written to ``reports/`` by ``specgate.report``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import Engine, EngineError, ModelRef, Unsupported
from impl.registry import UnknownImpl, resolve
from specgate import models as model_cache
from specgate.gate import DISAGREE_TAG, NA_TAG


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgate")
    group.addoption(
        "--impl",
        default=os.environ.get("SPECGATE_IMPL", "oracle"),
        help="engine under test: oracle | hf | llamacpp | cmd:<command> | http:<url> | module:Class",
    )
    group.addoption(
        "--model",
        action="append",
        default=[],
        help="manifest id or path to a GGUF (repeatable); default: every cached manifest model",
    )
    group.addoption(
        "--models", default="", help="comma-separated manifest ids or GGUF paths (same as repeating --model)"
    )
    group.addoption("--stages", default="", help="comma-separated stages to gate (default: all)")
    group.addoption(
        "--live-references",
        action="store_true",
        help="also check against live references (transformers, llama.cpp, tiktoken)",
    )
    group.addoption("--report-dir", default="reports", help="where parity reports are written")


_live_references = False


def model_missing(reason: str) -> None:
    """A test's model is not in the cache. Under ``--live-references`` (``nox -s tests``,
    which fetches and generates every model first) that is a broken setup: fail.
    Otherwise (a partial local run) skip, saying which command provides it."""
    if _live_references:
        pytest.fail(f"model missing from the cache: {reason}", pytrace=False)
    pytest.skip(f"model missing from the cache: {reason}")


def pytest_configure(config: pytest.Config) -> None:
    global _live_references
    _live_references = bool(config.getoption("--live-references"))
    config.addinivalue_line("markers", "gate(stage): a stage gate run against the engine under test")
    config.stash[RESULTS] = GateResults(impl=config.getoption("--impl"))
    # --models a,b is --model a --model b: fold it in so every reader of --model sees it.
    extra = [m.strip() for m in config.getoption("--models").split(",") if m.strip()]
    config.option.model = list(dict.fromkeys([*config.getoption("--model"), *extra]))


# ---------------------------------------------------------------------------
# model selection


def selected_models(config: pytest.Config) -> list[str]:
    chosen = list(config.getoption("--model"))  # includes --models (see pytest_configure)
    return chosen if chosen else [*model_cache.cached_models(), *model_cache.cached_tiny_models()]


def selected_stages(config: pytest.Config) -> set[str] | None:
    raw = config.getoption("--stages")
    return {s.strip() for s in raw.split(",") if s.strip()} or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stages = selected_stages(config)
    if stages is None:
        return
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("gate")
        (keep if marker is None or marker.args[0] in stages else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``model_id`` (but not a snapshot ``case_id``) run once per selected model."""
    names = set(metafunc.fixturenames)
    if (
        "model_id" in names
        and "case_id" not in names
        and not any("model_id" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    ):
        metafunc.parametrize("model_id", selected_models(metafunc.config))


_refs: dict[str, ModelRef] = {}


def get_model(spec: str) -> ModelRef:
    """A cached ``ModelRef`` per --model spec (hashing a user GGUF happens once)."""
    if spec not in _refs:
        _refs[spec] = model_cache.model_ref(spec)
    return _refs[spec]


@pytest.fixture(scope="session")
def models(request: pytest.FixtureRequest) -> list[str]:
    return selected_models(request.config)


@pytest.fixture
def model(model_id: str) -> ModelRef:
    try:
        return get_model(model_id)
    except model_cache.ModelError as exc:
        pytest.fail(str(exc), pytrace=False)


# ---------------------------------------------------------------------------
# engines


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine under test (``--impl``), built once per session."""
    spec = request.config.getoption("--impl")
    try:
        eng = resolve(spec)
    except UnknownImpl as exc:
        raise pytest.UsageError(str(exc)) from exc
    yield eng
    eng.close()


_reference_cache: dict[str, Engine] = {}


@pytest.fixture(scope="session")
def reference(request: pytest.FixtureRequest) -> Iterator[Callable[[str], Engine]]:
    """``reference("hf")`` → a live reference adapter, loaded once per session.

    Without ``--live-references`` a test needing one is skipped (it is not a gate);
    with it, a reference that cannot load is an error, never a silent skip.
    """
    live = request.config.getoption("--live-references")

    def get(name: str) -> Engine:
        if not live:
            pytest.skip(f"live reference {name!r} not requested (use --live-references)")
        if name not in _reference_cache:
            eng = resolve(name)
            if not eng.is_reference:
                raise pytest.UsageError(f"{name!r} is not a reference adapter")
            _reference_cache[name] = eng
        return _reference_cache[name]

    yield get
    for eng in _reference_cache.values():
        eng.close()
    _reference_cache.clear()


# ---------------------------------------------------------------------------
# outcome classification and the matrix


@dataclass
class GateRecord:
    stage: str
    model: str
    outcome: str
    nodeid: str
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateResults:
    impl: str
    records: list[GateRecord] = field(default_factory=list)


RESULTS = pytest.StashKey[GateResults]()


def classify(report: pytest.TestReport, call: pytest.CallInfo[Any] | None) -> tuple[str, str]:
    if report.passed:
        return "pass", ""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(DISAGREE_TAG):
            return "reference-disagreement", reason[len(DISAGREE_TAG) :].strip()
        return "n/a", reason.removeprefix(NA_TAG).strip()
    if call is not None and call.excinfo is not None and call.excinfo.errisinstance(EngineError):
        return "error", str(call.excinfo.value)
    if (
        call is not None
        and call.excinfo is not None
        and call.excinfo.errisinstance((AssertionError, Unsupported))
    ):
        # The gate's own message (model, case, stage, first divergence), without the traceback.
        return "fail", str(call.excinfo.value)
    return "fail", report.longreprtext


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    marker = item.get_closest_marker("gate")
    if marker is None:
        return
    # Setup failures count too; record once per test (the call phase, or a failed/skipped setup).
    if report.when == "call" or (report.when == "setup" and not report.passed):
        params = getattr(item, "callspec", None)
        model_id = params.params.get("model_id", "-") if params else "-"
        if not isinstance(model_id, str):
            return  # an empty parameter set (no model has this stage's snapshot): nothing was gated
        verdict, message = classify(report, call)
        metrics = dict(p for p in item.user_properties if isinstance(p, tuple) and p[0].startswith("metric:"))
        item.config.stash[RESULTS].records.append(
            GateRecord(
                marker.args[0],
                model_id,
                verdict,
                item.nodeid,
                message,
                {k.removeprefix("metric:"): v for k, v in metrics.items()},
            )
        )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash[RESULTS]
    if not results.records:
        return
    from specgate import report

    terminalreporter.write_sep("=", f"specgate parity matrix — impl {results.impl}")
    terminalreporter.write_line(report.matrix_text(results.records))
    written = report.write_reports(results, config.getoption("--report-dir"))
    for path in written:
        terminalreporter.write_line(f"report: {path}")


# ---------------------------------------------------------------------------
# data-driven gate parametrization


def gate_params(config: pytest.Config, stage: str) -> list[Any]:
    """``(model_id, case_id)`` params for a stage gate: every selected, cached model
    that has a ``stage`` snapshot × every case in it (ids read from the snapshot)."""
    from specgate import snapshots

    params = []
    for model_id in selected_models(config):
        if model_id not in snapshots.available(stage):
            continue
        path = snapshots.path_for(model_id, stage)
        import json

        for case_id in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            params.append(pytest.param(model_id, case_id, id=f"{model_id}/{case_id}"))
    return params


_snapshot_memo: dict[tuple[str, str], dict[str, Any]] = {}


def snapshot_cases(model: ModelRef, stage: str) -> dict[str, Any]:
    """A stage snapshot's cases, loaded and provenance-checked once per session.
    A stale snapshot (model sha256 changed) fails loudly."""
    from specgate import snapshots

    key = (model.id, stage)
    if key not in _snapshot_memo:
        try:
            _snapshot_memo[key] = snapshots.load(model, stage)
        except snapshots.SnapshotError as exc:
            pytest.fail(str(exc), pytrace=False)
    return _snapshot_memo[key]

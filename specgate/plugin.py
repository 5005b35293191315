"""The pytest side of specgate: options, shared fixtures, outcome classification,
the run verdict and the parity matrix.

Loaded from the project's top-level ``conftest.py``. Gate tests carry
``@pytest.mark.gate("<stage>")`` and take a ``model_id`` parameter; their outcomes
are classified by the typed outcome exceptions of ``specgate.outcomes.gate`` into the
stage × model matrix printed at the end of the run and written to ``reports/`` by
``specgate.reports.parity_report``. Gates of the logits and generate stages also take a
``conformance_class`` parameter: their rows are ``logits/exact``,
``logits/quantized``, ``generate/exact`` and ``generate/quantized``.

The hooks below only delegate: the options (``specgate.run.options``), the session
and its answer cache (``specgate.run.session``), the usage check (``specgate.run.usage``),
the selection of models, stages and cases (``specgate.run.selection``), the parametrization
(``specgate.run.params``), the outcome classification (``specgate.run.outcome``) and the
end of the run (``specgate.reports.run_end``). The stages themselves are ``specgate.stages``.
The session lives in ``config.stash[SESSION]`` (fixture ``specgate``), nowhere else.

Usage mistakes (an unknown ``--impl``, stage or model, a program that does not
exist, a file that is not a GGUF, a model with nothing to gate) stop the run before
it starts, with one line and exit status 4 — never hundreds of per-case errors
blamed on the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from impl.protocol import Engine, EngineError, ModelRef
from impl.registry import UnknownImpl, resolve
from specgate.outcomes.verdict import GateRecord, run_verdict  # noqa: F401
from specgate.reports import run_end
from specgate.run import interrupts, outcome, params, setup_check, startup, usage, wire
from specgate.run.options import add_options, add_snapshot_dir_option, strict_mode  # noqa: F401
from specgate.run.selection import (
    group_by_model,
    keep_sample,
    keep_shard,
    keep_stages,
    row_stage,
    selected_models,
    selected_stages,
)
from specgate.run.session import (  # noqa: F401 — the helpers tests and gates import from here
    SESSION,
    AnswerCache,
    SpecgateSession,
    missing_is_failure,
    model_missing,
    setup_missing,
)
from specgate.run.shard import chosen_shard
from specgate.stages import CLASSED_STAGES, CONFORMANCE_CLASSES, GATE_STAGES  # noqa: F401
from specgate.supply import models as model_cache
from specgate.upkeep import snapshots


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gate(stage): a stage gate run against the engine under test")
    config.addinivalue_line(
        "markers",
        "applies_to(predicate, models=False): run a model_id / forward_model_id test only for the selected "
        "models the predicate accepts (with models=True it also takes the run's model lookup); a "
        "parametrization that can never apply is not generated",
    )
    session = config.stash[SESSION] = SpecgateSession(
        impl=config.getoption("--impl"),
        strict=strict_mode(config),
        live_references=bool(config.getoption("--live-references")),
        snapshot_root=snapshots.root_of(config),
    )
    interrupts.install(config)  # Ctrl-C: the first stops the run with a report, the second exits
    session.shard = chosen_shard(config.getoption("--shard"))
    session.report_name = config.getoption("--report-name")
    # --models a,b is --model a --model b: fold it in so every reader of --model sees it.
    extra = [m.strip() for m in config.getoption("--models").split(",") if m.strip()]
    config.option.model = list(dict.fromkeys([*config.getoption("--model"), *extra]))
    if hasattr(config, "workerinput") or getattr(config.option, "help", False):  # --help gates nothing
        return
    usage.check_usage(config)
    if config.getoption("--parity-junit") and not config.option.xmlpath:
        from specgate.reports.parity_report import report_stem

        os.makedirs(config.getoption("--report-dir"), exist_ok=True)
        stem = report_stem(config.getoption("--report-name") or config.getoption("--impl"), session.shard)
        config.option.xmlpath = os.path.join(config.getoption("--report-dir"), f"{stem}.xml")


def pytest_sessionstart(session: pytest.Session) -> None:
    from specgate.run import junit_file

    junit_file.make_atomic(session.config)  # a full disk: no truncated JUnit file, no INTERNALERROR


@pytest.fixture(scope="session")
def specgate(request: pytest.FixtureRequest) -> SpecgateSession:
    return request.config.stash[SESSION]


# ---------------------------------------------------------------------------
# collection: the selection and the parametrization


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep_stages(config, items)
    session = config.stash[SESSION]
    setup_check.check(config, session, items, session.model, params.snapshot_stage)
    usage.check_models_gated(config, items)
    keep_shard(config, items)
    keep_sample(config, items)
    group_by_model(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    from specgate.run import scheduling

    os.environ.update(scheduling.blas_threads(len(specs), os.cpu_count() or 1, os.environ))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from specgate.run import scheduling

    return scheduling.make_scheduler(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    params.parametrize(metafunc)


@pytest.fixture(scope="session")
def models(request: pytest.FixtureRequest) -> list[str]:
    return selected_models(request.config)


@pytest.fixture
def model(specgate: SpecgateSession, model_id: str) -> ModelRef:
    from specgate.upkeep import corpus

    if model_id == corpus.CONSTRUCTS_MODEL_ID:  # the construct templates' pseudo model
        return corpus.constructs_model()
    try:
        return specgate.model(model_id)
    except model_cache.ModelError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def case(request: pytest.FixtureRequest, specgate: SpecgateSession, model: ModelRef, case_id: str) -> Any:
    """The gate's snapshot case, inputs and reference answers together. A case the
    references disagree on is put to the engine like any other: its gate judges the
    answer by the stage's primary reference (``specgate.outcomes.judge``)."""
    gate = request.node.get_closest_marker("gate")
    return specgate.snapshot_cases(model, params.snapshot_stage(gate))[case_id]


# ---------------------------------------------------------------------------
# engines


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine under test (``--impl``), built once per session. An engine that
    cannot even start (its handshake fails every time) stops the run with one line:
    there is nothing to gate."""
    spec = request.config.getoption("--impl")
    try:
        eng = resolve(spec)
    except UnknownImpl as exc:
        raise pytest.UsageError(str(exc)) from exc
    state = request.config.stash[SESSION]
    try:
        eng.capabilities  # noqa: B018 — a process engine starts and says hello here
    except EngineError as exc:
        eng.close()
        state.startup_failure = why = startup.reason(spec, exc)
        if hasattr(request.config, "workerinput"):  # a worker cannot stop the run: its cases error
            raise EngineError(why) from None
        run_end.startup_report(state, request.config, selected_models, selected_stages)
        pytest.exit(why, returncode=1)
    from specgate.run import provenance

    state.engine_info = provenance.engine(spec, eng)
    yield eng
    if hasattr(request.config, "workerinput"):  # a worker's engine ends with it
        eng.close()
    else:  # kept for the diagnosis and shrinking (no second load), closed after them
        state.engine = eng


@pytest.fixture(scope="session")
def reference(request: pytest.FixtureRequest) -> Iterator[Callable[[str], Engine]]:
    """``reference("hf")`` → a live reference adapter, loaded once per session.

    Without ``--live-references`` a test needing one is skipped (it is not a gate);
    with it, a reference that cannot load is an error, never a silent skip.
    """
    session = request.config.stash[SESSION]

    def get(name: str) -> Engine:
        if not session.live_references:
            pytest.skip(f"live reference {name!r} not requested (use --live-references)")
        if name not in session.references:
            eng = resolve(name)
            if not eng.is_reference:
                raise pytest.UsageError(f"{name!r} is not a reference adapter")
            session.references[name] = eng
        return session.references[name]

    yield get
    for eng in session.references.values():
        eng.close()
    session.references.clear()


# ---------------------------------------------------------------------------
# outcomes


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A case of a row cut short by a crash loop is not asked (``specgate.run.crashloop``)."""
    stage, params = row_stage(item), getattr(item, "callspec", None)
    if stage is not None and params is not None and isinstance(params.params.get("model_id"), str):
        item.config.stash[SESSION].crash_loops.check((stage, params.params["model_id"]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome_ = yield
    report: pytest.TestReport = outcome_.get_result()
    session = item.config.stash.get(SESSION, None)
    missing_is_failure(session, report, call.excinfo.value if call.excinfo is not None else None)
    stage = row_stage(item)
    # Setup failures count too; record once per test (the call phase, or a failed/skipped setup).
    if (
        stage is not None
        and session is not None
        and (report.when == "call" or (report.when == "setup" and not report.passed))
    ):
        outcome.record(session, item, report, call, stage)


# ---------------------------------------------------------------------------
# the run verdict and the matrix


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    interrupts.finish(session)  # an interrupted run: exit status 130
    state = session.config.stash.get(SESSION, None)
    if state is None or not (state.records or state.setup_error or interrupts.interrupted(session.config)):
        return  # (an interrupt before any case was gated still gets its reports)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller judges the whole run
        wire.send(state, workeroutput)
        return
    if setup_check.stopped(session, state):
        return
    state.verdict = run_verdict(state.records) + interrupts.verdict(session, len(state.records))
    if state.verdict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: take a finished worker's gate records into the session,
    so the verdict, the matrix and the reports cover every worker's cases."""
    wire.receive(node.config.stash[SESSION], getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The run's end (``run_end.summary``: the matrix, the diagnosis and shrinking, the
    reports), once per run: by the controller, not by each pytest-xdist worker, whose
    terminal nobody reads and whose records are a part of the run's (each worker wrote
    every report file of its part and drew the PNG, ~3.6 s of the main job, before the
    controller overwrote them)."""
    if hasattr(config, "workerinput"):
        return
    run_end.summary(terminalreporter, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The gate's engine, if the end of the run did not close it (no summary was written)."""
    state = config.stash.get(SESSION, None)
    if state is not None and state.engine is not None:
        state.engine, engine = None, state.engine
        engine.close()

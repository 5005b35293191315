"""The pytest side of specgate: options, shared fixtures, outcome classification,
the run verdict and the parity matrix.

Loaded from the project's top-level ``conftest.py``. Gate tests carry
``@pytest.mark.gate("<stage>")`` and take a ``model_id`` parameter; their outcomes
are classified by the typed outcome exceptions of ``specgate.gate`` into the
stage × model matrix printed at the end of the run and written to ``reports/`` by
``specgate.report``. Gates of the logits and generate stages also take a
``conformance_class`` parameter: their rows are ``logits/exact``,
``logits/quantized``, ``generate/exact`` and ``generate/quantized``.

Usage mistakes (an unknown ``--impl``, stage or model, a program that does not
exist, a file that is not a GGUF, a model with nothing to gate) stop the run before
it starts, with one line and exit status 4 — never hundreds of per-case errors
blamed on the engine.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.protocol import CONFORMANCE_CLASSES, Engine, EngineError, ModelRef, Unsupported
from impl.registry import UnknownImpl, check, resolve
from specgate import case_answers, interrupts, selection, snapshots, text_safety
from specgate import models as model_cache
from specgate.gate import NotApplicable, ReferenceDisagreement, Refused
from specgate.run import crashloop, setup_check, startup, wire
from specgate.selection import row_stage, selected_stages
from specgate.shard import chosen_shard
from specgate.verdict import GateRecord, run_verdict

#: Gate stages (the ``gate`` marker's argument) and the conformance classes of those
#: judged in two classes (see PROTOCOL.md, "Conformance classes").
GATE_STAGES = ("metadata", "render", "template", "split", "encode", "decode", "logits", "sample", "generate",
               "trace")  # fmt: skip
CLASSED_STAGES = ("logits", "generate", "trace")


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
        help="manifest id or path to a GGUF (repeatable); default: every model the snapshots define",
    )
    group.addoption(
        "--models", default="", help="comma-separated manifest ids or GGUF paths (same as repeating --model)"
    )
    group.addoption(
        "--stages",
        default="",
        help=f"comma-separated stages to gate (default: all): {', '.join(GATE_STAGES)}; "
        "logits, generate and trace also as <stage>/exact or <stage>/quantized",
    )
    group.addoption(
        "--live-references",
        action="store_true",
        help="also check against live references (transformers, llama.cpp, tiktoken)",
    )
    group.addoption("--report-dir", default="reports", help="where parity reports are written")
    group.addoption(
        "--report-name",
        default="",
        help="NAME: the report files' stem is made from NAME instead of --impl (e.g. a server's "
        "engine name, so a loopback port never names a file)",
    )
    group.addoption(
        "--shard",
        default="",
        help="I/N: run only shard I of N of the gate cases (cost-balanced; specgate report merge joins them)",
    )
    group.addoption(
        "--max-cases",
        type=int,
        default=0,
        help="N: gate at most N cases per stage and model, spread evenly over the snapshot's cases "
        "(deterministic; the ecosystem CI sample). 0: all",
    )
    group.addoption(
        "--parity-junit",
        action="store_true",
        help="also write the JUnit XML into --report-dir, named like the other report files",
    )
    group.addoption(
        "--shrink-budget",
        type=float,
        default=120.0,
        help="seconds spent in total shrinking the failing groups' reproducers after the run "
        "(0: no reproducers; default 120)",
    )
    group.addoption(
        "--diagnose-budget",
        type=float,
        default=60.0,
        help="seconds spent in total after the run putting failing tokenizer cases to the engine again and "
        "to the diagnosis catalogue's hypotheses, to name their causes (0: no diagnoses; default 60)",
    )
    group.addoption(
        "--shrink-group-budget", type=float, default=20.0, help="seconds of shrinking per group (default 20)"
    )
    add_snapshot_dir_option(group)
    group.addoption(
        "--record-references",
        action="store_true",
        help="record the reference snapshots from the live references (tests/references) instead of re-checking "
        "them (nox -s snapshots; syrupy's --snapshot-update updates the suite's own layout snapshots)",
    )


def add_snapshot_dir_option(group: Any) -> None:
    """``--snapshot-dir DIR``: the snapshots of this run live in DIR instead of the
    repository's ``snapshots/`` — how a user's own GGUF is recorded (``nox -s snapshots
    -- --model PATH --snapshot-dir DIR``) and gated (``nox -s parity`` with the same two)."""
    group.addoption(
        "--snapshot-dir",
        default=None,
        help="read (and, under --record-references, write) the reference snapshots in this directory "
        "instead of the repository's snapshots/ (for your own GGUF)",
    )


# ---------------------------------------------------------------------------
# the session object


class AnswerCache:
    """The engine's answers, computed once per (operation, model, input) however
    many gates read them. Gates run case by case, so the few newest answers are
    enough; large ones (a prompt's logits) are not kept longer than that. A refusal
    is remembered like an answer; a crash or a hang is not — the next case asks
    again, so one crash costs one case."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._answers: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.computed = 0  # how many answers were computed (for tests of the sharing)

    def get(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if key in self._answers:
            self._answers.move_to_end(key)
            value = self._answers[key]
        else:
            self.computed += 1
            try:
                value = compute()
            except (Refused, NotApplicable) as exc:  # a refusal is an answer too: not asked twice
                value = _Raised(exc)
            self._answers[key] = value
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)
        if isinstance(value, _Raised):
            raise value.exc
        return value


@dataclass
class _Raised:
    exc: BaseException


@dataclass
class SpecgateSession:
    """Everything one pytest run of specgate holds: the options, the gate records and
    the engine's answers. Kept in ``config.stash``; reached by the ``specgate``
    fixture."""

    impl: str
    strict: bool = False
    live_references: bool = False
    records: list[GateRecord] = field(default_factory=list)
    answers: AnswerCache = field(default_factory=AnswerCache)
    verdict: list[str] = field(default_factory=list)  # why the run fails beyond per-case failures
    groups: list[Any] | None = None  # root-cause groups with reproducers (specgate.triage), after the run
    snapshot_root: Any = None  # the run's snapshot directory (``snapshots.root_of``), set at configure
    shard: tuple[int, int] | None = None  # --shard I/N: (I, N)
    report_name: str = ""  # --report-name: the report stem's source instead of the impl string
    models: dict[str, ModelRef] = field(default_factory=dict)  # --model spec or user GGUF id -> ModelRef
    references: dict[str, Engine] = field(default_factory=dict)  # live reference adapters, loaded once
    snapshots: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (model, stage) -> cases
    setup_problems: list[str] = field(default_factory=list)  # unreadable snapshots met while parametrizing
    setup_error: str = ""  # a pytest-xdist worker's setup problem, reported by the controller
    crash_loops: crashloop.CrashLoops = field(default_factory=crashloop.CrashLoops)  # engine deaths
    engine_info: dict[str, Any] | None = None  # the engine's self-description (specgate.provenance)
    startup_failure: str = ""  # the one-line reason the engine did not start
    provenance: dict[str, Any] | None = None  # the reports' provenance (specgate.provenance.run), at the end

    def snapshot_cases(self, model: ModelRef, stage: str) -> dict[str, Any]:
        """A stage snapshot's cases, loaded and provenance-checked once per session.
        A stale snapshot (model sha256 changed) fails loudly. The construct templates'
        pseudo model's snapshot is always the repository's."""
        key = (model.id, stage)
        if key not in self.snapshots:
            root = snapshots.SNAPSHOT_ROOT if model.role == "corpus" else self.snapshot_root
            try:
                self.snapshots[key] = snapshots.load(model, stage, root)
            except snapshots.SnapshotError as exc:
                pytest.fail(str(exc), pytrace=False)
        return self.snapshots[key]


SESSION = pytest.StashKey[SpecgateSession]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gate(stage): a stage gate run against the engine under test")
    config.addinivalue_line(
        "markers",
        "applies_to(predicate): run a model_id / forward_model_id test only for the selected models "
        "the predicate accepts (a parametrization that can never apply is not generated)",
    )
    config.stash[SESSION] = SpecgateSession(
        impl=config.getoption("--impl"),
        strict=strict_mode(config),
        live_references=bool(config.getoption("--live-references")),
        snapshot_root=snapshots.root_of(config),
    )
    _running[0] = config.stash[SESSION]
    interrupts.install(config)  # Ctrl-C: the first stops the run with a report, the second exits
    config.stash[SESSION].shard = chosen_shard(config.getoption("--shard"))
    config.stash[SESSION].report_name = config.getoption("--report-name")
    # --models a,b is --model a --model b: fold it in so every reader of --model sees it.
    extra = [m.strip() for m in config.getoption("--models").split(",") if m.strip()]
    config.option.model = list(dict.fromkeys([*config.getoption("--model"), *extra]))
    if hasattr(config, "workerinput"):
        return
    check_usage(config)
    if config.getoption("--parity-junit") and not config.option.xmlpath:
        from specgate.report import report_stem

        os.makedirs(config.getoption("--report-dir"), exist_ok=True)
        config.option.xmlpath = os.path.join(
            config.getoption("--report-dir"),
            f"{report_stem(config.getoption('--report-name') or config.getoption('--impl'), config.stash[SESSION].shard)}.xml",
        )


def strict_mode(config: pytest.Config) -> bool:
    """pytest's own ``--strict`` ("be strict") is specgate's too: every refusal fails.
    (pytest 9 sets the ``strict`` ini option; pytest 8 stores the flag.)"""
    try:
        if config.getini("strict") in (True, "true", "True", "1"):
            return True
    except ValueError:  # pytest 8 has no such ini option
        pass
    return bool(getattr(config.option, "strict", False))


# ``get_model`` and ``model_missing`` are called from test modules and helpers that
# have no config at hand (module-level parametrization, subprocess helpers); they
# reach the running session through this one slot, which holds no state of its own.
_running: list[SpecgateSession | None] = [None]


def running_session() -> SpecgateSession:
    """The session of the pytest run in progress (a fresh one outside any run)."""
    if _running[0] is None:
        _running[0] = SpecgateSession(impl="", snapshot_root=snapshots.SNAPSHOT_ROOT)
    return _running[0]


@pytest.fixture(scope="session")
def specgate(request: pytest.FixtureRequest) -> SpecgateSession:
    return request.config.stash[SESSION]


# ---------------------------------------------------------------------------
# usage errors: one line, before anything runs


def check_usage(config: pytest.Config) -> None:
    """Stop the run with one line (``pytest.UsageError``, exit status 4) on an unknown
    stage, an unusable ``--impl`` or ``--model``, or a snapshot file that is not one."""
    stages = selected_stages(config)
    if stages is not None:
        known = {*GATE_STAGES, *(f"{s}/{c}" for s in CLASSED_STAGES for c in CONFORMANCE_CLASSES)}
        unknown = sorted(stages - known)
        if unknown:
            raise pytest.UsageError(
                f"--stages: unknown stage(s) {', '.join(unknown)}; known: {', '.join(GATE_STAGES)} "
                f"(logits, generate and trace also as <stage>/exact or <stage>/quantized)"
            )
    try:
        check(config.getoption("--impl"))
    except UnknownImpl as exc:
        raise pytest.UsageError(str(exc)) from None
    explicit = config.getoption("--model")
    chosen, missing = (explicit, []) if explicit else selection.split_cached(selected_models(config))
    for spec in chosen:  # the cache's own models are verified too; the missing ones are one error
        try:
            ref = get_model(spec)
        except model_cache.ModelError as exc:
            raise pytest.UsageError(f"--model {spec!r}: {exc}" if explicit else str(exc)) from None
        if ref.role == "user":
            from oracle.gguf import GGUFError, open_gguf

            try:
                open_gguf(ref.gguf)
            except GGUFError as exc:
                raise pytest.UsageError(f"--model {spec!r}: not a readable GGUF file: {exc}") from None
    snapshots.check_files(config.stash[SESSION].snapshot_root, selected_models(config))  # UsageError
    if missing:
        raise pytest.UsageError(selection.missing_line(missing, config.stash[SESSION].snapshot_root))


def check_models_gated(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An explicitly chosen model that no selected gate case covers gates nothing:
    say so (and which snapshots it has) instead of passing an empty run."""
    gate_items = [i for i in items if i.get_closest_marker("gate") is not None]
    if not gate_items or not config.getoption("--model"):
        return
    covered = {str(i.callspec.params.get("model_id")) for i in gate_items if hasattr(i, "callspec")}
    root = config.stash[SESSION].snapshot_root
    for spec in config.getoption("--model"):
        ref = get_model(spec)
        if ref.id in covered or spec in covered:
            continue
        stages = snapshots.stages_of(ref.id, root)
        if not stages:
            record = f"nox -s snapshots -- --model {spec} --snapshot-dir DIR"
            raise pytest.UsageError(
                f"--model {spec!r}: no reference snapshots for {ref.id!r} under {root}, so nothing can be "
                f"gated; record them from the live references with `{record}`, then gate with "
                f"`nox -s parity -- --model {spec} --snapshot-dir DIR`"
            )
        raise pytest.UsageError(
            f"--model {spec!r}: no selected gate case covers it (its snapshots: {', '.join(stages)}; "
            f"--stages {config.getoption('--stages') or '(all)'})"
        )


# ---------------------------------------------------------------------------
# model and stage selection


def setup_missing(reason: str, remedy: str = "") -> None:
    """Something a test needs is missing (a cached model, a reference library, an installed
    third-party engine). Under ``--live-references`` (``nox -s tests`` and ``live``, which
    install and fetch all of it first) that is a broken setup: fail, naming ``remedy``.
    Otherwise (a partial local run) skip, saying what is missing."""
    if running_session().live_references:
        pytest.fail(f"{reason} ({remedy})" if remedy else reason, pytrace=False)
    pytest.skip(reason)


def model_missing(reason: str) -> None:
    """A test's model is not in the cache (``reason`` names the command that provides it)."""
    setup_missing(f"model missing from the cache: {reason}")


def selected_models(config: pytest.Config) -> list[str]:
    """The model ids of the run: a user's GGUF path (``--model PATH``) appears as its
    ``ModelRef`` id (the file stem), the id its snapshots are kept under."""
    chosen = list(config.getoption("--model"))  # includes --models (see pytest_configure)
    if not chosen:  # what the snapshots define, cached or not (specgate.selection)
        return selection.default_models(config.stash[SESSION].snapshot_root)
    return [user_model_id(spec) for spec in chosen]


def user_model_id(spec: str) -> str:
    """``spec`` itself, or the id of the user GGUF it is a path to (an unusable spec is
    left as it is: ``check_usage`` has reported it, or the ``model`` fixture will)."""
    try:
        ref = get_model(spec)
    except model_cache.ModelError:
        return spec
    return ref.id if ref.role == "user" else spec


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stages = selected_stages(config)
    if stages is not None:
        keep, drop = [], []
        for item in items:
            stage = row_stage(item)
            chosen = stage is None or stage in stages or stage.split("/")[0] in stages
            (keep if chosen else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    setup_check.check(config, config.stash[SESSION], items, get_model, snapshot_stage)
    check_models_gated(config, items)
    keep_shard(config, items)
    keep_sample(config, items)


def keep_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the gate cases other shards run (``specgate.shard``); other tests run in shard 1."""
    from specgate.shard import ShardError, gate_group, load_costs, split_cases

    shard = config.stash[SESSION].shard
    if shard is None:
        return
    try:
        costs = load_costs()
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None

    def case_of(item: pytest.Item) -> tuple[str, str, str] | None:
        stage, params = row_stage(item), getattr(item, "callspec", None)
        if stage is None or params is None or not isinstance(params.params.get("model_id"), str):
            return None
        return stage, params.params["model_id"], str(params.params.get("case_id", item.nodeid))

    cases = {item: case_of(item) for item in items}
    mine = split_cases([c for c in cases.values() if c is not None], *shard, costs)
    ours = [(gate_group(*cases[i]) in mine) if cases[i] else shard[0] == 1 for i in items]
    if not all(ours):
        config.hook.pytest_deselected(items=[i for i, own in zip(items, ours, strict=True) if not own])
        items[:] = [i for i, own in zip(items, ours, strict=True) if own]


def keep_sample(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--max-cases N``: of each (stage, model) row's gate cases keep N spread evenly over
    the collection order (first, last and between), so a small sample still reaches
    the kinds of input later in the snapshot. Other tests are kept."""
    limit = config.getoption("--max-cases")
    if limit < 0:
        raise pytest.UsageError(f"--max-cases {limit}: must be 0 (all) or a positive number of cases")
    if not limit:
        return
    rows: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        stage, params = row_stage(item), getattr(item, "callspec", None)
        if stage is not None and params is not None:
            rows.setdefault((stage, str(params.params.get("model_id"))), []).append(item)
    drop = set()
    for row in rows.values():
        if len(row) > limit:
            chosen = {round(i * (len(row) - 1) / max(limit - 1, 1)) for i in range(limit)}
            drop.update(item for i, item in enumerate(row) if i not in chosen)
    if drop:
        config.hook.pytest_deselected(items=[i for i in items if i in drop])
        items[:] = [i for i in items if i not in drop]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A gate (``gate`` marker, ``case_id`` argument) runs once per snapshot case of each
    selected model (``gate_params``), and once per conformance class in the classed
    stages. Other tests taking ``model_id`` run once per selected model, those taking
    ``forward_model_id`` once per selected model with weights; an ``applies_to(predicate)``
    marker keeps the models its predicate accepts (no parametrization that would only skip)."""
    names = set(metafunc.fixturenames)
    gate = metafunc.definition.get_closest_marker("gate")
    if gate is not None and "case_id" in names:
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, gate))
        if gate.args[0] in CLASSED_STAGES:  # the class varies fastest: both classes share one answer
            metafunc.parametrize("conformance_class", CONFORMANCE_CLASSES)
    elif "forward_model_id" in names:  # the logits references: the models with weights
        metafunc.parametrize("forward_model_id", applicable(metafunc, forward_models(metafunc.config)))
    elif (
        "model_id" in names
        and "case_id" not in names
        and not any("model_id" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    ):
        metafunc.parametrize("model_id", applicable(metafunc, selected_models(metafunc.config)))


def applicable(metafunc: pytest.Metafunc, model_ids: list[str]) -> list[str]:
    """The ``model_ids`` every ``applies_to`` marker of the test accepts."""
    for marker in metafunc.definition.iter_markers("applies_to"):
        model_ids = [m for m in model_ids if marker.args[0](m)]
    return model_ids


def get_model(spec: str) -> ModelRef:
    """A cached ``ModelRef`` per --model spec (hashing a user GGUF happens once). A user
    GGUF is then also found by its id, which the gates are parametrized with."""
    refs = running_session().models
    if spec not in refs:
        ref = model_cache.model_ref(spec)
        if ref.role == "user":
            register_user_model(refs, spec, ref)
        refs[spec] = ref
    return refs[spec]


def register_user_model(refs: dict[str, ModelRef], spec: str, ref: ModelRef) -> None:
    """Make ``ref.id`` (the GGUF's file stem) name the user's GGUF for the rest of the
    run; an id that already names another model would make the snapshots ambiguous."""
    taken = refs.get(ref.id)
    if taken is not None and taken.gguf != ref.gguf:
        raise model_cache.ModelError(
            f"its id {ref.id!r} (the file name without .gguf) already names {taken.gguf}; rename one of the files"
        )
    if taken is None and model_cache.is_known_id(ref.id):
        raise model_cache.ModelError(
            f"its id {ref.id!r} (the file name without .gguf) is also a manifest or tiny model id, "
            "whose snapshots would be taken for its own; rename the file"
        )
    refs[ref.id] = ref


@pytest.fixture(scope="session")
def models(request: pytest.FixtureRequest) -> list[str]:
    return selected_models(request.config)


@pytest.fixture
def model(model_id: str) -> ModelRef:
    from specgate import corpus

    if model_id == corpus.CONSTRUCTS_MODEL_ID:  # the construct templates' pseudo model
        return corpus.constructs_model()
    try:
        return get_model(model_id)
    except model_cache.ModelError as exc:
        pytest.fail(str(exc), pytrace=False)


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
        startup.report(state, request.config, selected_models, selected_stages)
        pytest.exit(why, returncode=1)
    from specgate import provenance

    state.engine_info = provenance.engine(spec, eng)
    yield eng
    eng.close()


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
# outcome classification


def classify(report: pytest.TestReport, call: pytest.CallInfo[Any] | None, strict: bool) -> tuple[str, str]:
    """The gate outcome of one test report, by the type of what the test raised."""
    exc = call.excinfo.value if call is not None and call.excinfo is not None else None
    if report.passed:
        return "pass", ""
    if isinstance(exc, Refused):
        return ("fail", f"refusal under --strict: {exc.msg}") if strict else ("refused", str(exc.msg))
    if isinstance(exc, ReferenceDisagreement):
        return "reference-disagreement", str(exc.msg)
    if report.skipped:  # NotApplicable, or any other skip (a model missing from a partial cache)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "n/a", reason.removeprefix("Skipped: ").strip()
    if isinstance(exc, EngineError):
        return "error", str(exc)
    if isinstance(exc, (AssertionError, Unsupported)) or (
        exc is not None and isinstance(exc, pytest.fail.Exception)
    ):
        # The gate's own message (model, case, stage, first divergence), without the traceback.
        return "fail", str(getattr(exc, "msg", None) or exc)
    return "fail", report.longreprtext


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A case of a row cut short by a crash loop is not asked (``specgate.run.crashloop``)."""
    stage, params = row_stage(item), getattr(item, "callspec", None)
    if stage is not None and params is not None and isinstance(params.params.get("model_id"), str):
        item.config.stash[SESSION].crash_loops.check((stage, params.params["model_id"]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    stage = row_stage(item)
    if stage is None:
        return
    # Setup failures count too; record once per test (the call phase, or a failed/skipped setup).
    if report.when == "call" or (report.when == "setup" and not report.passed):
        params = getattr(item, "callspec", None)
        model_id = params.params.get("model_id", "-") if params else "-"
        if not isinstance(model_id, str):
            return  # an empty parameter set (no model has this stage's snapshot): nothing was gated
        session = item.config.stash[SESSION]
        verdict, message = classify(report, call, session.strict)
        message = text_safety.record_message(report, message)  # bounded; inert when pytest prints it
        exc = call.excinfo.value if call.excinfo is not None else None
        session.crash_loops.saw((stage, model_id), verdict, exc)
        if verdict == "fail" and report.skipped:  # a refusal under --strict fails in pytest too
            report.outcome = "failed"
            report.longrepr = message
        props = [p for p in item.user_properties if isinstance(p, tuple) and str(p[0]).startswith("metric:")]
        metrics = {str(k).removeprefix("metric:"): v for k, v in props}
        case_id = str(params.params.get("case_id", "")) if params else ""
        kept = case_answers.record(item, stage, verdict)  # the engine's answer, bounded
        session.records.append(
            GateRecord(stage, model_id, verdict, item.nodeid, message, metrics, case_id, kept)
        )


# ---------------------------------------------------------------------------
# the run verdict and the matrix


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    interrupts.finish(session)  # an interrupted run: exit status 130
    state = session.config.stash.get(SESSION, None)
    if state is None or not (state.records or state.setup_error):
        return
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
    state = config.stash[SESSION]
    if not state.records or state.setup_error:
        return terminalreporter.write_line(f"ERROR: {state.setup_error}") if state.setup_error else None
    from specgate import report

    terminalreporter.write_sep("=", f"specgate parity matrix — impl {state.impl}")
    terminalreporter.write_line(report.headline(state.records))
    terminalreporter.write_line(report.matrix_text(state.records))
    for problem in [*crashloop.notes(state.records), *state.verdict]:
        terminalreporter.write_line(report.terminal(f"specgate: RUN FAILS — {problem}"), red=True, bold=True)
    startup.attach_provenance(state, config, selected_models, selected_stages)
    shrink_reproducers(state, config, terminalreporter)
    written = report.write_reports(state, config.getoption("--report-dir"))
    for path in written:
        terminalreporter.write_line(f"report: {path}")


def shrink_reproducers(state: SpecgateSession, config: pytest.Config, terminalreporter: Any) -> None:
    """Group the findings by root cause and shrink one reproducer per group against a
    fresh engine of the same ``--impl`` (``specgate.triage``), within --shrink-budget."""
    import time
    from pathlib import Path

    from specgate import files, report, triage

    repro_dir = Path(config.getoption("--report-dir")) / "repro" / report.report_stem(state.impl, state.shard)
    files.remove_stale(repro_dir)  # the stem's reproducers are this run's only
    if interrupts.interrupted(config):  # after a Ctrl-C no new engine is started
        state.groups = triage.group_records(state.records)
        interrupts.skip_shrinking(config, state.groups)
        return
    start = time.monotonic()
    state.groups = interrupts.guarded(config, state.records, lambda: triage.examine(
        state.records,
        state.impl,
        repro_dir,
        group_budget=config.getoption("--shrink-group-budget"),
        total_budget=config.getoption("--shrink-budget"),
        diagnose_budget=config.getoption("--diagnose-budget"),
        worth_shrinking=crashloop.worth_shrinking,  # not a crash loop's groups: any input dies
    ))  # fmt: skip
    interrupts.after_shrinking(config, state)  # a Ctrl-C while diagnosing or shrinking: marked, exit 130
    if not any(g.records[0].outcome in triage.SHRUNK_OUTCOMES for g in state.groups):
        return
    made = sum(g.reproducer is not None for g in state.groups)
    named = sum(bool(g.diagnosis) for g in state.groups)
    terminalreporter.write_line(
        f"specgate: {len(state.groups)} root-cause groups, {named} with a diagnosed cause, {made} minimized "
        f"reproducers ({time.monotonic() - start:.1f} s of diagnosing and shrinking)"
    )


# ---------------------------------------------------------------------------
# data-driven gates: the cases come from the snapshots


def snapshot_stage(gate: pytest.Mark) -> str:
    """The snapshot a gate reads: its stage's, or the one the marker names
    (``@pytest.mark.gate("render", snapshot="render_template")``)."""
    return gate.kwargs.get("snapshot", gate.args[0])


def gate_params(config: pytest.Config, gate: pytest.Mark) -> list[Any]:
    """``(model_id, case_id)`` params for a gate: every selected model that has the
    gate's snapshot × every case in it (ids read from the snapshot; the marker's
    ``cases`` prefix, when given, picks some). The construct templates' snapshot has
    one pseudo model, gated whatever models are selected."""
    from specgate import corpus

    stage, prefix = snapshot_stage(gate), gate.kwargs.get("cases", "")
    root = config.stash[SESSION].snapshot_root
    models = selected_models(config)
    if stage == "render_template":
        root, models = snapshots.SNAPSHOT_ROOT, [corpus.CONSTRUCTS_MODEL_ID]
    params = []
    for model_id in models:
        if model_id not in snapshots.available(stage, root):
            continue
        for case_id in setup_check.case_ids(config.stash[SESSION].setup_problems, model_id, stage, root):
            if case_id.startswith(prefix):
                params.append(pytest.param(model_id, case_id, id=f"{model_id}/{case_id}"))
    return params


@pytest.fixture
def case(request: pytest.FixtureRequest, specgate: SpecgateSession, model: ModelRef, case_id: str) -> Any:
    """The gate's snapshot case, inputs and reference answers together. A case the
    references disagree on is put to the engine like any other: its gate judges the
    answer by the stage's primary reference (``specgate.judge``)."""
    gate = request.node.get_closest_marker("gate")
    return specgate.snapshot_cases(model, snapshot_stage(gate))[case_id]


def forward_models(config: pytest.Config) -> list[str]:
    """Models with weights: the --model selection (a user's GGUF when it holds tensors),
    else the default selection (specgate.selection)."""
    manifest = model_cache.load_manifest()
    return [m for m in selected_models(config) if has_weights(m, manifest)]


def has_weights(model_id: str, manifest: dict[str, model_cache.ModelEntry]) -> bool:
    """A manifest model by its role; a tiny model always; a user's GGUF when its file holds tensors."""
    if model_id in manifest:
        return manifest[model_id].role == "full-weights"
    try:
        return model_cache.has_weights(get_model(model_id))
    except model_cache.ModelError:
        return True  # kept: its test reports why it cannot run (model_missing)


def snapshot_cases(model: ModelRef, stage: str) -> dict[str, Any]:
    """``snapshot_cases`` of the running session (for callers without the ``specgate`` fixture)."""
    return running_session().snapshot_cases(model, stage)

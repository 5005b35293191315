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

from impl.protocol import Engine, EngineError, ModelRef, Unsupported
from impl.registry import UnknownImpl, check, resolve
from specgate import models as model_cache
from specgate import selection
from specgate.gate import NotApplicable, ReferenceDisagreement, Refused
from specgate.selection import row_stage, selected_stages
from specgate.verdict import GateRecord, run_verdict

#: Gate stages (the ``gate`` marker's argument) and the conformance classes of those
#: judged in two classes (see PROTOCOL.md, "Conformance classes").
GATE_STAGES = ("metadata", "render", "template", "split", "encode", "decode", "logits", "sample", "generate",
               "trace")  # fmt: skip
CLASSED_STAGES = ("logits", "generate", "trace")
CONFORMANCE_CLASSES = ("exact", "quantized")


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
        "--shrink-group-budget", type=float, default=20.0, help="seconds of shrinking per group (default 20)"
    )
    add_snapshot_dir_option(group)
    group.addoption(
        "--snapshot-update",
        action="store_true",
        help="record the reference snapshots from the live references (tests/references) instead of re-checking them",
    )


def add_snapshot_dir_option(group: Any) -> None:
    """``--snapshot-dir DIR``: the snapshots of this run live in DIR instead of the
    repository's ``snapshots/`` — how a user's own GGUF is recorded (``nox -s snapshots
    -- --model PATH --snapshot-dir DIR``) and gated (``nox -s parity`` with the same two)."""
    group.addoption(
        "--snapshot-dir",
        default=None,
        help="read (and, under --snapshot-update, write) the reference snapshots in this directory "
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
    models: dict[str, ModelRef] = field(default_factory=dict)  # --model spec or user GGUF id -> ModelRef
    references: dict[str, Engine] = field(default_factory=dict)  # live reference adapters, loaded once
    snapshots: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (model, stage) -> cases

    def snapshot_cases(self, model: ModelRef, stage: str) -> dict[str, Any]:
        """A stage snapshot's cases, loaded and provenance-checked once per session.
        A stale snapshot (model sha256 changed) fails loudly. The construct templates'
        pseudo model's snapshot is always the repository's."""
        from specgate import snapshots

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
    from specgate import snapshots

    config.addinivalue_line("markers", "gate(stage): a stage gate run against the engine under test")
    config.stash[SESSION] = SpecgateSession(
        impl=config.getoption("--impl"),
        strict=strict_mode(config),
        live_references=bool(config.getoption("--live-references")),
        snapshot_root=snapshots.root_of(config),
    )
    _running[0] = config.stash[SESSION]
    config.stash[SESSION].shard = chosen_shard(config)
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
            f"{report_stem(config.getoption('--impl'), config.stash[SESSION].shard)}.xml",
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
        from specgate import snapshots

        _running[0] = SpecgateSession(impl="", snapshot_root=snapshots.SNAPSHOT_ROOT)
    return _running[0]


@pytest.fixture(scope="session")
def specgate(request: pytest.FixtureRequest) -> SpecgateSession:
    return request.config.stash[SESSION]


# ---------------------------------------------------------------------------
# usage errors: one line, before anything runs


def check_usage(config: pytest.Config) -> None:
    """Stop the run with one line (``pytest.UsageError``, exit status 4) on an
    unknown stage, an unusable ``--impl`` or an unusable ``--model``."""
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
    if missing:
        raise pytest.UsageError(selection.missing_line(missing, config.stash[SESSION].snapshot_root))


def check_models_gated(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An explicitly chosen model that no selected gate case covers gates nothing:
    say so (and which snapshots it has) instead of passing an empty run."""
    from specgate import snapshots

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
    check_models_gated(config, items)
    keep_shard(config, items)
    keep_sample(config, items)


def chosen_shard(config: pytest.Config) -> tuple[int, int] | None:
    """``--shard I/N`` as ``(I, N)``; a bad value is one usage line."""
    from specgate.shard import ShardError, parse_shard

    raw = config.getoption("--shard")
    if not raw:
        return None
    try:
        return parse_shard(raw)
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None


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
    ``forward_model_id`` once per selected model with weights."""
    names = set(metafunc.fixturenames)
    gate = metafunc.definition.get_closest_marker("gate")
    if gate is not None and "case_id" in names:
        metafunc.parametrize(("model_id", "case_id"), gate_params(metafunc.config, gate))
        if gate.args[0] in CLASSED_STAGES:  # the class varies fastest: both classes share one answer
            metafunc.parametrize("conformance_class", CONFORMANCE_CLASSES)
    elif "forward_model_id" in names:  # the logits references: the models with weights
        metafunc.parametrize("forward_model_id", forward_models(metafunc.config))
    elif (
        "model_id" in names
        and "case_id" not in names
        and not any("model_id" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    ):
        metafunc.parametrize("model_id", selected_models(metafunc.config))


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
    try:
        eng.capabilities  # noqa: B018 — a process engine starts and says hello here
    except EngineError as exc:
        eng.close()
        why = f"specgate: the engine {spec!r} did not start: {str(exc).splitlines()[0]}"
        on_xdist_worker = hasattr(request.config, "workerinput")
        if on_xdist_worker:  # a worker cannot stop the run: each of its cases errors with the reason
            pytest.fail(why, pytrace=False)
        pytest.exit(why, returncode=1)
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
        if verdict == "fail" and report.skipped:  # a refusal under --strict fails in pytest too
            report.outcome = "failed"
            report.longrepr = message
        metrics = dict(p for p in item.user_properties if isinstance(p, tuple) and p[0].startswith("metric:"))
        session.records.append(
            GateRecord(
                stage,
                model_id,
                verdict,
                item.nodeid,
                message,
                {k.removeprefix("metric:"): v for k, v in metrics.items()},
                str(params.params.get("case_id", "")) if params else "",
            )
        )


# ---------------------------------------------------------------------------
# the run verdict and the matrix


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(SESSION, None)
    if state is None or not state.records:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller judges the whole run
        workeroutput["specgate_records"] = records_to_wire(state.records)
        return
    state.verdict = run_verdict(state.records)
    if state.verdict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def records_to_wire(records: list[GateRecord]) -> str:
    """The gate records as JSON text (numpy scalars in metrics become floats), for xdist's channel."""
    import dataclasses
    import json

    return json.dumps([dataclasses.asdict(r) for r in records], default=float)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: take a finished worker's gate records into the session,
    so the verdict, the matrix and the reports cover every worker's cases."""
    import json

    text = getattr(node, "workeroutput", {}).get("specgate_records")
    if text:
        state = node.config.stash[SESSION]
        state.records.extend(GateRecord(**r) for r in json.loads(text))
        state.records.sort(key=lambda r: r.nodeid)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash[SESSION]
    if not state.records:
        return
    from specgate import report

    terminalreporter.write_sep("=", f"specgate parity matrix — impl {state.impl}")
    terminalreporter.write_line(report.headline(state.records))
    terminalreporter.write_line(report.matrix_text(state.records))
    for problem in state.verdict:
        terminalreporter.write_line(f"specgate: RUN FAILS — {problem}", red=True, bold=True)
    shrink_reproducers(state, config, terminalreporter)
    written = report.write_reports(state, config.getoption("--report-dir"))
    for path in written:
        terminalreporter.write_line(f"report: {path}")


def shrink_reproducers(state: SpecgateSession, config: pytest.Config, terminalreporter: Any) -> None:
    """Group the findings by root cause and shrink one reproducer per group against a
    fresh engine of the same ``--impl`` (``specgate.triage``), within --shrink-budget."""
    import time
    from pathlib import Path

    from specgate import report, triage

    state.groups = triage.group_records(state.records)
    if not any(g.records[0].outcome in triage.SHRUNK_OUTCOMES for g in state.groups):
        return
    start = time.monotonic()
    triage.shrink_groups(
        state.groups,
        state.impl,
        Path(config.getoption("--report-dir")) / "repro" / report.report_stem(state.impl, state.shard),
        group_budget=config.getoption("--shrink-group-budget"),
        total_budget=config.getoption("--shrink-budget"),
    )
    made = sum(g.reproducer is not None for g in state.groups)
    terminalreporter.write_line(
        f"specgate: {len(state.groups)} root-cause groups, {made} minimized reproducers "
        f"({time.monotonic() - start:.1f} s of shrinking)"
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
    import json

    from specgate import corpus, snapshots

    stage, prefix = snapshot_stage(gate), gate.kwargs.get("cases", "")
    root = config.stash[SESSION].snapshot_root
    models = selected_models(config)
    if stage == "render_template":
        root, models = snapshots.SNAPSHOT_ROOT, [corpus.CONSTRUCTS_MODEL_ID]
    params = []
    for model_id in models:
        if model_id not in snapshots.available(stage, root):
            continue
        path = snapshots.path_for(model_id, stage, root)
        for case_id in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            if case_id.startswith(prefix):
                params.append(pytest.param(model_id, case_id, id=f"{model_id}/{case_id}"))
    return params


@pytest.fixture
def case(request: pytest.FixtureRequest, specgate: SpecgateSession, model: ModelRef, case_id: str) -> Any:
    """The gate's snapshot case, inputs and reference answers together. A case the
    references disagree on is a ``reference-disagreement``, never put to the engine."""
    from specgate.gate import reference_disagreement

    gate = request.node.get_closest_marker("gate")
    found = specgate.snapshot_cases(model, snapshot_stage(gate))[case_id]
    if "disagreement" in found:
        reference_disagreement(found["disagreement"])
    return found


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

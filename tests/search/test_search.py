"""The differential search (``specgate.search``) against engines with known defects.

* Each mutant engine of ``tests/engines/mutants/`` whose stage the search covers,
  run as an external process, has its planted defect found within a small budget,
  confirmed by the live references and reported with a reproducer of a few
  characters, messages or logits that ``specgate repro`` replays.
* The oracle served through ``cmd:`` gives no finding at all in the same budget.
* A divergence the references do not confirm is never an engine failure: against a
  deliberately broken oracle (injected: the search takes the live oracle as a
  parameter) the same divergences are oracle bugs; without references they are
  unconfirmed candidates.
* The same seed generates the same inputs; a later run resumes from the example
  database (its first example is the saved failure).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from impl.oracle import OracleEngine
from impl.registry import resolve
from specgate.plugin import model_missing, setup_missing
from specgate.run import triage
from specgate.search import reference_confirm as confirm
from specgate.search import report
from specgate.search.search_session import run_search
from specgate.search.searchable import DEFAULT_SEARCHABLE, SEARCHABLE, size
from specgate.search.stage_search import search_stage
from specgate.supply import models as model_cache

MUTANTS = Path(__file__).resolve().parents[1] / "engines" / "mutants"
#: Search budgets in clock readings, not seconds: every search here runs on ``Ticks`` (below),
#: a clock that advances 0.01 a reading, so the examples a search tries — and whether it
#: reaches a planted defect — do not depend on how busy the machine is. 25 is ~650-1,600
#: examples of a tokenizer, render or sampler stage; a generate or logits example runs the
#: tiny model's forward, so those get 2 (~115 generate examples).
BUDGET = 25.0
FORWARD_BUDGET = 2.0


def require(model_id: str) -> None:
    if model_id not in model_cache.cached_models():
        model_missing(f"{model_id}; run: specgate models fetch")


def script_impl(name: str) -> str:
    return f"cmd:{sys.executable} {MUTANTS / name}.py"


@dataclass(frozen=True)
class Mutant:
    script: str
    stages: tuple[str, ...]
    found: dict[str, int]  # stage -> largest acceptable reproducer (size units of stages.size)


MUTANT_CASES = [
    Mutant("tokenizer_no_lookahead", ("split", "encode"), {"split": 4, "encode": 4}),
    Mutant("template_swallow_chatml", ("render",), {"render": 3}),
    Mutant("sampler_top_p_ge", ("sample",), {"sample": 4}),
    # a stop string straddling two tokens, cut out of the oracle's own continuation: a few characters
    Mutant("stop_per_token", ("generate",), {"generate": 6}),
]


def require_models(stages: tuple[str, ...]) -> None:
    """The models a mutant's stages run on: the tokenizer vocabulary, a tiny float32 model."""
    if set(stages) - {"generate", "logits"}:
        require("qwen3-vocab")
    if set(stages) & {"generate", "logits"} and "tiny-qwen2-f32" not in model_cache.cached_tiny_models():
        model_missing("tiny-qwen2-f32; run: specgate models tiny")


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANT_CASES, ids=[m.script for m in MUTANT_CASES])
def test_search_finds_the_planted_defect(mutant: Mutant, tmp_path: Path) -> None:
    require_models(mutant.stages)
    impl = script_impl(mutant.script)
    engine = resolve(impl)
    budget = FORWARD_BUDGET if {"generate", "logits"} & set(mutant.stages) else BUDGET
    try:
        result = run_search(
            engine, impl, stages=list(mutant.stages), budget=budget, seed=1, database=tmp_path / "db",
            clock=Ticks(),
        )  # fmt: skip
        report.write(result, tmp_path)
        failures = result.by_verdict(confirm.ENGINE_DIVERGENCE)
        assert {f.candidate.stage for f in failures} == set(mutant.found), [
            (f.candidate.signature, f.confirmation.as_dict()) for f in result.findings
        ]
        assert not result.by_verdict(confirm.ORACLE_BUG)
        for f in failures:
            assert size(f.input) <= mutant.found[f.candidate.stage], f.input
            if f.candidate.stage == "generate":  # one or two stop strings, judged by transformers' stream
                assert 1 <= len(f.input["params"]["stop"]) <= 2, f.input
                assert f.confirmation.judges == {"hf": "agrees with the oracle"}, f.confirmation.judges
            data = triage.load_reproducer(f.reproducer_path)  # the parity run's reproducer format
            verdict, same = triage.replay(data, engine)
            assert verdict.outcome == "fail" and same, verdict.message
            assert triage.replay(data, OracleEngine())[0].outcome == "pass"
    finally:
        engine.close()
    # The search and the settling of its findings stop at the budget (on the ticking clock:
    # a reading past the deadline ends each loop, minimizing one variant may take a few more).
    assert result.seconds <= budget + 1, result.seconds


@pytest.mark.slow
def test_the_oracle_over_cmd_shows_nothing(tmp_path: Path) -> None:
    require("qwen3-vocab")
    impl = f"cmd:{sys.executable} -m specgate.cli engine --impl oracle"
    engine = resolve(impl)
    try:
        result = run_search(engine, impl, budget=2 * BUDGET, seed=1, database=tmp_path / "db", clock=Ticks())
    finally:
        engine.close()
    assert [r.stage for r in result.runs] == list(DEFAULT_SEARCHABLE)
    assert all(r.examples > 20 for r in result.runs), [(r.stage, r.examples) for r in result.runs]
    assert result.findings == [], [f.candidate.signature for f in result.findings]
    assert all(not r.oracle_errors for r in result.runs), [r.oracle_errors for r in result.runs]


@pytest.mark.slow
def test_the_oracle_over_cmd_shows_nothing_in_generate(tmp_path: Path) -> None:
    """The generate stage (asked for by name) in the mutants' budget: stop strings cut
    across token boundaries of the oracle's own continuations find nothing on the oracle."""
    require_models(("generate",))
    impl = f"cmd:{sys.executable} -m specgate.cli engine --impl oracle"
    engine = resolve(impl)
    try:
        result = run_search(
            engine, impl, stages=["generate"], budget=FORWARD_BUDGET, seed=1, database=tmp_path / "db",
            clock=Ticks(),
        )  # fmt: skip
    finally:
        engine.close()
    assert [r.stage for r in result.runs] == ["generate"]
    assert all(r.examples > 20 for r in result.runs), [(r.stage, r.examples) for r in result.runs]
    assert result.findings == [], [f.candidate.signature for f in result.findings]
    assert all(not r.oracle_errors for r in result.runs), [r.oracle_errors for r in result.runs]


class PerTokenStopOracle(OracleEngine):
    """A deliberately broken stand-in for the live oracle: its generate matches stop
    strings inside each token's piece only (the stop_per_token mutant's defect)."""

    def generate(self, model, ids, params):  # type: ignore[no-untyped-def]
        stops = [s.encode("utf-8") for s in params.get("stop", []) if s]
        result = super().generate(model, ids, {**params, "stop": []})
        stream = b""
        for n, token in enumerate(result["ids"]):
            piece = self.decode(model, [token])
            hits = [len(stream) + i for s in stops if (i := piece.find(s)) >= 0]
            stream += piece
            if hits:
                cut = stream[: min(hits)]
                return {
                    **result,
                    **{
                        "ids": result["ids"][: n + 1],
                        "bytes": cut.hex(),
                        "text": cut.decode("utf-8", "replace"),
                    },
                    **{"chunks": [cut.hex()] if cut else [], "finish_reason": "stop_string"},
                    "steps": result["steps"][: n + 1],
                }
        return result


@pytest.mark.slow
def test_a_generate_oracle_mistake_is_an_oracle_bug(tmp_path: Path) -> None:
    """Generate divergences are judged by transformers' greedy stream with the documented
    stop rule applied: against an oracle that misses straddling stop strings, the correct
    engine is sided with, and every finding is an oracle bug."""
    require_models(("generate",))
    result = run_search(
        OracleEngine(), "oracle", stages=["generate"], budget=FORWARD_BUDGET, seed=1,
        oracle=PerTokenStopOracle(), clock=Ticks(),
    )  # fmt: skip
    assert result.findings, "the search did not reach a straddling stop string"
    assert {f.confirmation.verdict for f in result.findings} == {confirm.ORACLE_BUG}
    assert all(f.confirmation.judges == {"hf": "agrees with the engine"} for f in result.findings)


def test_stop_strings_straddle_token_boundaries() -> None:
    """The generate stage's stop strings: cut across each boundary of the continuation's
    pieces (1-3 bytes a side, whole UTF-8 only), or inside one piece."""
    from specgate.search.generation import inner_stops, straddling_stops

    pieces = [b"ab", b"\xc3", b"\xa9d", b"e"]  # "é" split across two tokens
    found = straddling_stops(pieces)
    assert {"b\xe9", "\xe9", "\xe9d", "b\xe9d", "de", "\xe9de"} <= set(found)
    assert "ab" not in found  # inside one piece: not a straddle
    assert inner_stops(pieces) == ["ab", "a", "e"]


class DigitGluingOracle(OracleEngine):
    """A deliberately broken stand-in for the live oracle: its split glues runs of
    digits into one piece (the Qwen2 rule takes digits one at a time)."""

    def split(self, model, text):
        pieces: list[str] = []
        for piece in super().split(model, text):
            if pieces and piece.isdigit() and pieces[-1].isdigit():
                pieces[-1] += piece
            else:
                pieces.append(piece)
        return pieces


def test_an_oracle_mistake_is_an_oracle_bug_never_an_engine_failure(tmp_path: Path) -> None:
    require("qwen3-vocab")
    engine = OracleEngine()  # agrees with CPython regex, the split reference
    result = run_search(  # budgets in Ticks (below): the examples searched do not depend on load
        engine, "oracle", stages=["split"], budget=8, seed=3, database=None, oracle=DigitGluingOracle(),
        clock=Ticks(),
    )  # fmt: skip
    assert result.findings, "the search did not reach a digit run"
    assert {f.confirmation.verdict for f in result.findings} == {confirm.ORACLE_BUG}
    assert all(f.confirmation.judges == {"regex": "agrees with the engine"} for f in result.findings)
    text = report.markdown(result)
    assert "## Engine divergences (confirmed by the references): 0" in text
    assert "## ORACLE BUGS — the references agree with the engine, not with the oracle: 1" in text


def test_without_references_candidates_are_unconfirmed_not_failures(tmp_path: Path) -> None:
    require("qwen3-vocab")
    withheld = confirm.References({"regex": "regex withheld by this test"})
    result = run_search(  # budgets in Ticks (below): the examples searched do not depend on load
        DigitGluingOracle(), "digit-gluing", stages=["split"], budget=8, seed=3, references=withheld,
        clock=Ticks(),
    )  # fmt: skip
    assert result.findings
    assert {f.confirmation.verdict for f in result.findings} == {confirm.UNCONFIRMED}
    paths = report.write(result, tmp_path)
    body = json.loads(paths[1].read_text(encoding="utf-8"))
    assert body["references_missing"] == ["unavailable: regex withheld by this test"]
    assert "## Engine divergences (confirmed by the references): 0" in paths[0].read_text(encoding="utf-8")


class Ticks:
    """A clock that advances a fixed step per reading: wall time out of the picture."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


def _search(seed: int, database: Path | None) -> object:
    model = model_cache.model_ref("qwen3-vocab")
    clock = Ticks()
    return search_stage(
        SEARCHABLE["split"], "qwen3-vocab", model, DigitGluingOracle(), OracleEngine(),
        seed=seed, deadline=3.0, database=database, clock=clock,
    )  # fmt: skip


def test_same_seed_same_search_and_resume_from_the_database(tmp_path: Path) -> None:
    require("qwen3-vocab")
    first, again, other = _search(5, None), _search(5, None), _search(6, None)
    assert first.examples == again.examples and first.candidates.keys() == again.candidates.keys()
    assert [c.first_input for c in first.candidates.values()] == [
        c.first_input for c in again.candidates.values()
    ]
    assert [c.first_input for c in first.candidates.values()] != [
        c.first_input for c in other.candidates.values()
    ]
    saved = _search(5, tmp_path / "db")
    assert min(c.found_after for c in saved.candidates.values()) > 1
    resumed = _search(7, tmp_path / "db")  # another seed: the saved failure comes first
    assert min(c.found_after for c in resumed.candidates.values()) == 1


@pytest.mark.slow
def test_search_finds_the_rope_defect_on_a_tiny_model(tmp_path: Path) -> None:
    """The forward stage (asked for by name) on a tiny float32 model: the interleaved
    RoPE shows from the second position on, so two or three ids reproduce it."""
    if "tiny-qwen2-f32" not in model_cache.cached_tiny_models():
        model_missing("tiny-qwen2-f32; run: specgate models tiny")
    impl = script_impl("rope_interleaved")
    engine = resolve(impl)
    try:
        result = run_search(
            engine, impl, stages=["logits"], budget=FORWARD_BUDGET, seed=1, database=None, clock=Ticks()
        )
    finally:
        engine.close()
    failures = result.by_verdict(confirm.ENGINE_DIVERGENCE)
    assert failures and all(f.candidate.stage == "logits" for f in failures), [
        (f.candidate.signature, f.confirmation.as_dict()) for f in result.findings
    ]
    assert min(size(f.input) for f in failures) <= 3
    assert all(f.confirmation.judges == {"hf": "agrees with the oracle"} for f in failures)


def test_save_to_corpus_writes_regular_cases(tmp_path: Path) -> None:
    """A reproducer becomes a case of the corpus file its stage reads (a copy of the
    corpus here), in that file's own format; a decode reproducer is refused by name."""
    import shutil

    from specgate.search.corpus_saving import SaveError, save
    from specgate.upkeep.corpus import CORPUS

    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus, ignore=shutil.ignore_patterns("*.toml"))
    base = {"impl": "cmd:x", "signature": "s", "model": "qwen3-vocab", "group": "g-1"}
    path, command = save(
        {**base, "stage": "encode", "input": {"text": "\t'l", "parse_special": True}}, corpus
    )
    last = json.loads(path.read_text(encoding="utf-8").rstrip("\n").split("\n")[-1])
    assert last == {"id": "search-g-1", "category": "search", "text": "\t'l"} and "snapshots" in command
    with pytest.raises(SaveError, match="already a tokenizer corpus case"):
        save({**base, "stage": "split", "input": {"text": "\t'l"}}, corpus)
    messages = [{"role": "user", "content": "x"}]
    path, _ = save(
        {
            **base,
            "stage": "render",
            "input": {"messages": messages, "add_generation_prompt": True, "kwargs": {}},
        },
        corpus,
    )
    case = json.loads(path.read_text(encoding="utf-8"))
    assert case["messages"] == messages and case["add_generation_prompt"] == [True]
    numbered = [int(p.name[:2]) for p in (CORPUS / "conversations").glob("*.json")]
    assert path.parent == corpus / "conversations" and path.name.startswith(
        f"{max(numbered) + 1:02d}_search_"
    )
    path, _ = save({**base, "stage": "render", "input": {"template": "{{ s }}", "context": {"s": 1}}}, corpus)
    assert path.parent == corpus / "templates" / "constructs"
    assert json.loads(path.read_text(encoding="utf-8"))["template"] == "{{ s }}"
    with pytest.raises(SaveError, match="decode reproducer has no corpus file"):
        save({**base, "stage": "decode", "input": {"ids": [98]}}, corpus)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--impl", "oracle", "--stages", "split,tokenise"],
            "unknown stage(s) ['tokenise']; searchable stages:",
        ),
        (["--impl", "nonesuch"], "unknown --impl 'nonesuch'"),
        (["--impl", "oracle", "--budget", "10x"], "invalid duration '10x': use e.g. 90s, 10m, 1h"),
        (["--save-to", "corpus", "--from", "/nonexistent.json"], "cannot read /nonexistent.json"),
        (
            ["--impl", f"cmd:{sys.executable} -c pass"],
            "exited (or closed stdout) before answering the handshake",
        ),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    import subprocess

    run = subprocess.run(
        [sys.executable, "-m", "specgate.cli", "search", *args, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert run.returncode == (4 if "--from" in args else 2), run.stdout + run.stderr  # a bad file: 4
    assert message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert (
        len([line for line in run.stderr.splitlines() if line.startswith("specgate") or "error:" in line])
        == 1
    )


@pytest.mark.live  # asks llama.cpp and HF tokenizers themselves
def test_unicode_version_skew_is_a_reference_disagreement(tmp_path: Path) -> None:
    """U+125F1 is unassigned in Python's and regex's Unicode data, a letter in llama.cpp's
    tables: whoever the references side with, the tokenizer stage's skew rule makes such
    an encode divergence a reference disagreement (found by the search against tokie)."""
    require("qwen3-vocab")
    model = model_cache.model_ref("qwen3-vocab")
    inp = {"text": "\U000125f1's", "parse_special": True}
    refs = confirm.References()
    try:
        engine = refs.get("llamacpp")  # an engine with llama.cpp's tables: both references side with it
        if isinstance(engine, str):
            setup_missing(
                f"the llama.cpp reference is not available: {engine}", remedy="nox -s live installs it"
            )
        verdict = confirm.confirm(SEARCHABLE["encode"], model, inp, engine, OracleEngine(), refs)
    finally:
        refs.close()
    assert verdict.judges["llamacpp"] == verdict.judges["hf"] == "agrees with the engine"
    assert verdict.verdict == confirm.REFERENCE_DISAGREEMENT and "U+125F1" in verdict.judges["unicode"]


class HoardingOracle(OracleEngine):
    """The oracle, keeping 1 MB for every split it answers: memory the search adds."""

    def __init__(self) -> None:
        super().__init__()
        self.hoard: list[bytes] = []

    def split(self, model, text):  # type: ignore[no-untyped-def]
        self.hoard.append(bytes(range(256)) * 4096)
        return super().split(model, text)


def test_the_memory_bound_stops_a_stage(tmp_path: Path) -> None:
    """The bound is on the memory the search adds (here an engine hoarding 1 MB per
    input), not on the process it runs in: inside a large test process it still runs."""
    require("qwen3-vocab")
    model = model_cache.model_ref("qwen3-vocab")
    # The deadlines count examples, not seconds (the clock ticks once an example), so
    # which budget stops a search does not depend on the machine's load: the first
    # cannot reach its deadline before the memory bound; the second runs 100 more.
    run = search_stage(
        SEARCHABLE["split"], "qwen3-vocab", model, HoardingOracle(), OracleEngine(),
        seed=1, deadline=2000, database=None, max_rss_mb=20.0, clock=itertools.count().__next__,
    )  # fmt: skip
    assert run.notes == ["stopped: the search's resident memory grew by more than 20 MB"], run
    assert run.examples % 50 == 0, run  # the bound is checked every 50 examples
    unbounded = search_stage(
        SEARCHABLE["split"], "qwen3-vocab", model, OracleEngine(), OracleEngine(),
        seed=1, deadline=run.examples + 100, database=None, max_rss_mb=20.0, clock=itertools.count().__next__,
    )  # fmt: skip
    assert unbounded.examples > run.examples and not unbounded.notes, (run, unbounded)


def test_a_search_of_an_engine_that_answers_nothing_fails(tmp_path: Path) -> None:
    """An engine that refuses every input was searched for nothing: the search says so in
    one line and exits 1 (issue 38: it exited 0, a clean bill)."""
    import shlex
    import subprocess

    require("qwen3-vocab")
    engine = Path(__file__).resolve().parents[1] / "engines" / "crashing_engine.py"
    impl = "cmd:" + shlex.join([sys.executable, str(engine), "refuse"])
    run = subprocess.run(
        [sys.executable, "-m", "specgate.cli", "search", "--impl", impl, "--stages", "encode", "--models",
         "qwen3-vocab", "--budget", "60s", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "CRASHING_ENGINE_LOAD": "0"},
    )  # fmt: skip
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    said = [line for line in run.stderr.splitlines() if "answered none of the" in line]
    assert len(said) == 1 and "nothing was searched" in said[0], run.stderr[-2000:]

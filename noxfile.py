"""nox sessions: tests, parity, snapshots, models, lint.

llama-cpp-python has no binary wheel on the package index this targets; it builds
from source in ~6 minutes on 2 cores. The built wheel is kept in
``<specgate cache>/wheels`` and every session installs from there, so only the very
first run on a machine builds it.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

LLAMA_CPP = "llama-cpp-python==0.3.36"
TORCH = "torch==2.13.0"  # a CPU wheel; any other spec pulls a multi-GB CUDA build


def cache_dir() -> Path:
    if env := os.environ.get("SPECGATE_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specgate"


def wheel_dir(session: nox.Session) -> Path:
    """Build llama-cpp-python's wheel once per machine; later sessions reuse it."""
    wheels = cache_dir() / "wheels"
    name = LLAMA_CPP.split("==")
    prefix = f"{name[0].replace('-', '_')}-{name[1]}-"
    if not any(p.name.startswith(prefix) for p in wheels.glob("*.whl")):
        wheels.mkdir(parents=True, exist_ok=True)
        session.log(f"building {LLAMA_CPP} from source once (~6 min on 2 cores) into {wheels}")
        session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), LLAMA_CPP)
    return wheels


def install(session: nox.Session, extras: str = "") -> None:
    """Install specgate (editable) with ``extras``; references come from the wheel dir."""
    session.install("--upgrade", "pip")
    target = f".[{extras}]" if extras else "."
    args = ["-e", target]
    if any(x in extras for x in ("references", "llamacpp", "dev")):
        args = ["--find-links", str(wheel_dir(session)), TORCH, *args]
    session.install(*args)


def fetch_models(session: nox.Session, tiny: bool) -> None:
    session.run("specgate", "models", "fetch")
    if tiny:
        session.run("specgate", "models", "tiny")


@nox.session
def tests(session: nox.Session) -> None:
    """The project's own tests: oracle unit/property tests, live references, gates."""
    install(session, "dev")
    fetch_models(session, tiny=True)
    session.run("pytest", "--live-references", *session.posargs)


@nox.session
def parity(session: nox.Session) -> None:
    """Gate an engine (``-- --impl NAME``) stage by stage against the snapshots."""
    args = list(session.posargs)
    impl = next((a.split("=", 1)[1] for a in args if a.startswith("--impl=")), None)
    if impl is None and "--impl" in args:
        impl = args[args.index("--impl") + 1]
    extras = {"hf": "hf", "llamacpp": "llamacpp,hf", "tiktoken": "tiktoken"}.get(impl or "", "")
    if impl and impl.startswith("http:"):
        extras = ""
    install(session, ",".join(filter(None, [extras, "report"])))
    fetch_models(session, tiny=False)
    # --parity-junit: the JUnit XML goes beside the .md/.json/.png, under the same file stem.
    session.run("pytest", "tests/gates", "-p", "no:cacheprovider", "--parity-junit", *args)


@nox.session
def snapshots(session: nox.Session) -> None:
    """Regenerate reference snapshots from the live references (after a model update)."""
    install(session, "references")
    fetch_models(session, tiny=True)
    session.run(
        "pytest",
        "tests/references",
        "--live-references",
        "--snapshot-update",
        "--snapshot-warn-unused",
        *session.posargs,
    )


@nox.session
def models(session: nox.Session) -> None:
    """Fetch the real models into the cache and generate the tiny ones."""
    install(session, "references")
    fetch_models(session, tiny=True)
    session.run("specgate", "models", "list")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")

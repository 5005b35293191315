"""Resolve ``--impl NAME`` to an engine adapter.

Accepted forms, in order:
  * a built-in name: ``oracle``, ``hf``, ``llamacpp`` (and the split/encode-only
    references ``regex`` and ``tiktoken``);
  * ``cmd:<command line>`` — an external process speaking PROTOCOL.md over stdio;
  * ``http:<base url>`` — a running llama.cpp-style HTTP server;
  * ``module:Class`` — any importable adapter class;
  * a name registered in the ``specgate.impls`` entry-point group.

The built-in adapters run in the judge's process. Every other Python adapter (a
``module:Class`` or an entry point) runs in a process of its own, served over
PROTOCOL.md (``python -m impl.serve --impl X``, what ``specgate engine``
runs) and reached through the ``cmd:`` client: an adapter is code the suite does not
own, and in the judge's interpreter it could patch the references the diagnosis and
the shrinking compare against (``oracle.rope.apply_rope``), or raise ``SystemExit``
past every outcome. Out of process it is judged exactly as the same engine under
``cmd:`` (ARCHITECTURE.md, "A judge no adapter can move"). ``in_process=True`` is for
the server itself.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from importlib.metadata import entry_points

from impl.protocol import Engine

BUILTINS: dict[str, str] = {
    "oracle": "impl.oracle:OracleEngine",
    "hf": "impl.hf.engine:HFEngine",
    "llamacpp": "impl.llamacpp.engine:LlamaCppEngine",
    "regex": "impl.text.engines:RegexSplitter",
    "tiktoken": "impl.text.engines:TiktokenEngine",
}
ENTRY_POINT_GROUP = "specgate.impls"
#: What a built-in adapter imports that the light install lacks, and the extra installing it.
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "hf": (("torch", "transformers", "tokenizers"), "hf"),
    "llamacpp": (("llama_cpp",), "llamacpp"),
    "tiktoken": (("tiktoken",), "tiktoken"),
}


class UnknownImpl(LookupError):
    pass


class MissingExtra(UnknownImpl):
    """A built-in adapter whose packages are not installed: a setup error (exit 4)."""


def _installed(spec: str) -> None:
    """Raise ``MissingExtra`` naming the extra to install when ``spec``'s packages are missing."""
    import importlib.util

    modules, extra = NEEDS.get(spec, ((), ""))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(
            f"--impl {spec} needs {', '.join(missing)}, not installed here: pip install 'specgate[{extra}]' "
            f"(or run it through nox -s parity -- --impl {spec}, which installs it)"
        )


def _load_class(target: str) -> type[Engine]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, attr)
    except ImportError as exc:
        raise UnknownImpl(f"cannot import adapter {target!r}: {exc}") from exc
    except AttributeError as exc:
        raise UnknownImpl(f"module {module_name!r} has no adapter class {attr!r}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Engine)):
        raise UnknownImpl(f"{target!r} is not an impl.protocol.Engine subclass")
    return cls


def served(spec: str) -> Engine:
    """The Python adapter ``spec`` in a process of its own, through the ``cmd:`` client.
    The child finds what this interpreter finds: our ``sys.path`` is its ``PYTHONPATH``."""
    from impl.process.client import CmdEngine

    return CmdEngine(shlex.join(server_argv(spec)), env=child_env())


def server_argv(spec: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "impl.serve", "--impl", spec, *extra]


def child_env() -> dict[str, str]:
    path = [p or os.getcwd() for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}


def resolve(spec: str, in_process: bool = False) -> Engine:
    """Build the adapter named by ``spec`` (see module docstring); a Python adapter
    that is not built in runs out of process unless ``in_process``."""
    if spec.startswith("cmd:"):
        from impl.process.client import CmdEngine

        return CmdEngine(spec[len("cmd:") :])
    if spec.startswith("http:"):
        from impl.http.engine import HttpEngine

        return HttpEngine(spec[len("http:") :])
    if spec in BUILTINS:
        _installed(spec)
        return _load_class(BUILTINS[spec])()
    if ":" in spec:
        return _load_class(spec)() if in_process else served(spec)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == spec:
            if not in_process:
                return served(spec)
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Engine)):
                raise UnknownImpl(f"entry point {spec!r} does not name an Engine subclass")
            return cls()
    known = ", ".join([*BUILTINS, "cmd:<command>", "http:<url>", "module:Class"])
    raise UnknownImpl(f"unknown --impl {spec!r}; known: {known}, or a {ENTRY_POINT_GROUP} entry point")


def _check_served(spec: str) -> None:
    """``UnknownImpl`` with the child's one line when ``spec`` does not load there."""
    import subprocess

    from impl.process import lifeline

    try:
        proc = lifeline.run(server_argv(spec, "--check"), capture_output=True, text=True, timeout=300,
                            env=child_env())  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UnknownImpl(f"--impl {spec!r}: the adapter did not load within 300 s") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        said = lines[-1] if lines else f"exit status {proc.returncode}"
        raise UnknownImpl(said.removeprefix("specgate engine: ")[:500])


def check(spec: str) -> None:
    """Raise ``UnknownImpl`` with one line when ``--impl spec`` cannot work, without
    starting anything: an unknown name or class, an unparsable command line, a
    program that does not exist, a malformed URL or timeout setting. Called before a
    run so that a usage mistake stops it at once instead of costing every case.
    (Process and HTTP adapters start or connect lazily, on the first request, so
    building one only validates its settings.)"""
    import os
    import shutil

    from impl import envvars
    from impl.protocol import EngineError

    try:
        envvars.check_all()  # every numeric SPECGATE_* setting, whichever adapter reads it
    except EngineError as exc:
        raise UnknownImpl(str(exc)) from None
    try:
        if spec.startswith(("cmd:", "http:")):
            engine = resolve(spec)
        elif spec in BUILTINS:
            _installed(spec)
            _load_class(BUILTINS[spec])
            return
        elif ":" in spec or any(ep.name == spec for ep in entry_points(group=ENTRY_POINT_GROUP)):
            _check_served(spec)  # imported in a child: never in the judge's process
            return
        else:
            resolve(spec)  # raises UnknownImpl naming what is known
            return
    except (EngineError, ValueError, TypeError) as exc:
        raise UnknownImpl(f"--impl {spec!r}: {exc}") from None
    program = getattr(engine, "argv", [None])[0]
    if program is not None:
        found = shutil.which(program) if os.sep not in program else program
        if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
            raise UnknownImpl(f"--impl {spec!r}: program {program!r} not found or not executable")

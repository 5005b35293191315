"""Who and what a parity report is about: the engine (from its handshake, or the
Python adapter's class), specgate's version and commit, the reference lock, Python
and platform, the date, the command line and the selection (models, stages, shard).

Gathered once per run: ``engine`` where the engine starts (a pytest-xdist worker
sends it to the controller), ``run`` at the end by the process that writes the
reports."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from impl.protocol import Engine

ROOT = Path(__file__).resolve().parents[2]


def engine(spec: str, eng: Engine) -> dict[str, Any]:
    """The engine under test as it describes itself: a process engine's handshake
    (``engine``, ``version``, ``classes``, ``protocol``), else the adapter's name,
    ``version()`` and ``classes``; always the adapter class and module."""
    info: dict[str, Any] = {
        "impl": spec,
        "adapter": f"{type(eng).__module__}.{type(eng).__qualname__}",
        "name": getattr(eng, "label", None) or eng.name,
    }
    handshake = getattr(eng, "handshake", None)
    try:
        if callable(handshake):
            hello = handshake()
            info.update(
                name=hello.get("engine"),
                version=hello.get("version"),
                classes=hello.get("classes", ["quantized"]),
                protocol=hello.get("protocol"),
            )
        else:
            info.update(version=eng.version(), classes=sorted(eng.classes))
    except Exception as exc:  # an adapter whose self-description fails still gets a report
        info["described"] = f"{type(exc).__name__}: {exc}"
    return info


def git_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes), or None outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def specgate_version() -> str:
    try:
        return version("specgate")
    except PackageNotFoundError:
        return "unknown (not installed)"


def run(
    engine_info: dict[str, Any] | None,
    command: list[str],
    models: list[str],
    stages: list[str] | None,
    shard: tuple[int, int] | None,
) -> dict[str, Any]:
    """The report's ``provenance`` block."""
    from specgate.upkeep import lock

    try:
        lock_sha = lock.sha256()
    except OSError as exc:
        lock_sha = f"unreadable ({exc})"
    return {
        "engine": engine_info,
        "specgate": {"version": specgate_version(), "commit": git_commit()},
        "lock": {"file": "/".join(lock.LOCK_FILE.parts[-2:]), "sha256": lock_sha},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command),
        "models": models,
        "stages": stages or "all",
        "shard": f"{shard[0]}/{shard[1]}" if shard else None,
    }


def lines(prov: dict[str, Any]) -> list[tuple[str, str]]:
    """The provenance as a few ``(label, text)`` lines (the label ends in its separator), the text raw: a handshake's name
    and version are the engine's own words, made inert by the format that shows them
    (``specgate.reports.parity_report.provenance_markdown``, ``specgate.reports.html.provenance_html``)."""
    prov = prov if isinstance(prov, dict) else {}
    eng = prov.get("engine") if isinstance(prov.get("engine"), dict) else {}
    classes = eng.get("classes") if isinstance(eng.get("classes"), list) else []
    who = (
        f"{eng.get('name')} {eng.get('version')} (classes: {', '.join(map(str, classes)) or 'none'}; "
        f"adapter {eng.get('adapter')})"
        if eng.get("adapter")
        else "not started"
    )
    sg = prov.get("specgate") if isinstance(prov.get("specgate"), dict) else {}
    lock = prov.get("lock") if isinstance(prov.get("lock"), dict) else {}
    models = prov.get("models") if isinstance(prov.get("models"), list) else []
    stages = prov.get("stages")
    stages = (
        stages if isinstance(stages, str) else ", ".join(map(str, stages if isinstance(stages, list) else []))
    )
    return [
        ("engine: ", who),
        (
            "specgate ",
            f"{sg.get('version')}, commit {sg.get('commit') or 'unknown'}; "
            f"lock {lock.get('file')} sha256 {lock.get('sha256')}",
        ),
        ("Python ", f"{prov.get('python')} on {prov.get('platform')}; {prov.get('date')}"),
        ("command: ", str(prov.get("command"))),
        (
            "models: ",
            f"{', '.join(map(str, models)) or '(none)'}; stages: {stages}"
            f"; shard: {prov.get('shard') or 'whole run'}",
        ),
    ]

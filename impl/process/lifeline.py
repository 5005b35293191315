"""Child processes that die with us: engines, servers, anything a run starts.

A child started with ``subprocess.Popen`` outlives its parent when the parent is
killed outright (``SIGKILL``, the kernel's OOM killer): nothing runs in the dead
parent to stop it, and a child in its own session does not even see a hang-up.
An engine stuck in a computation, or a server waiting for connections, then keeps
its memory and CPU until someone finds it.

``spawn`` starts every such child the same way:

* in its own session (process group), so that ``kill_group`` reaches whatever it
  started in turn;
* with the Linux parent-death signal set to ``SIGKILL`` (``prctl(PR_SET_PDEATHSIG)``)
  before the program is executed, so that the kernel kills it the moment we die.
  The signal is tied to the *thread* that started the child: start long-lived
  children from a thread that lives as long as they should (the main thread).

* with a marker in its environment (``SPECGATE_LIFELINE=<token>``), inherited by
  whatever it starts, so that ``kill_group`` also finds what left its process group
  and session: a grandchild that double-forked and called ``setsid`` is in no group of
  ours and, reparented to init, in no tree of ours either — but it carries the marker
  (``marked``: a scan of ``/proc/*/environ``, which root reads for every process). No
  cgroup is needed. (An engine that scrubs its children's environment escapes the
  scan; when we are killed outright, such a grandchild outlives us: only the direct
  child has the parent-death signal.)

Where ``prctl`` does not exist (not Linux), the child is still started in its own
group; only the parent-death guarantee is lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
#: The environment variable carrying a spawned child's token (``marked``).
MARKER = "SPECGATE_LIFELINE"
_TOKENS = itertools.count()


def _load_prctl() -> Callable[..., int] | None:
    """``prctl`` from the C library, resolved once here: the hook that calls it runs
    in the forked child, where loading a library is not safe."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _die_with(parent_pid: int) -> Callable[[], None]:
    """The hook run in the child between fork and exec."""

    def hook() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody signals us.
        if os.getppid() != parent_pid:
            os._exit(1)

    return hook


def tied() -> dict[str, Any]:
    """``Popen`` / ``subprocess.run`` keyword arguments: own session, killed when we die."""
    return {"start_new_session": True, "preexec_fn": _die_with(os.getpid())}


def _token() -> str:
    return f"{os.getpid()}-{next(_TOKENS)}-{secrets.token_hex(6)}"


def spawn(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, ...)`` in its own session, killed when we die, its
    environment (``env``, default ours) marked with a token of its own."""
    token = _token()
    env = popen_kwargs.pop("env", None)
    proc = subprocess.Popen(list(argv), **tied(), env={**(os.environ if env is None else env), MARKER: token},
                            **popen_kwargs)  # fmt: skip
    proc.lifeline_token = token  # type: ignore[attr-defined]
    return proc


def run(argv: Sequence[str], **run_kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, ...)`` in its own session, killed when we die."""
    return subprocess.run(list(argv), **tied(), **run_kwargs)


def marked(token: str) -> list[int]:
    """The processes whose environment carries ``token`` (what a spawned child started,
    wherever it went since: another session, reparented to init)."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_group(proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """Signal the child's whole process group: what it started goes too, even when
    the child itself has already exited."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
    token = getattr(proc, "lifeline_token", None)
    for pid in marked(token) if token else ():  # what left the group (setsid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after ``grace`` seconds."""
    kill_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()

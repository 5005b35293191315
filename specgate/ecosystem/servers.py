"""An engine's server: started per model on a free port, tied to our lifetime
(``impl.process.lifeline``), waited for until it accepts connections, stopped after."""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from impl.process import lifeline
from specgate.ecosystem.install import tail
from specgate.ecosystem.spec import EngineSpec, child_path
from specgate.supply.models import PROJECT_ROOT

SERVER_STARTUP_SECONDS = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(spec: EngineSpec, model_id: str, log: Path, deadline: float):
    """The engine's server for ``model_id`` on a free port, up (accepting connections)
    before the yield and stopped after; yields the port. Tied to our lifetime."""
    from specgate.supply import models as model_cache

    port = free_port()
    gguf = str(model_cache.model_ref(model_id).gguf)
    argv = shlex.split(spec.fill(spec.server or "", gguf=gguf, port=str(port), model=model_id))
    with open(log, "wb") as out:
        proc = lifeline.spawn(
            argv,
            cwd=PROJECT_ROOT,
            env={**os.environ, "PATH": child_path()},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_for_port(proc, port, log, min(deadline, time.monotonic() + SERVER_STARTUP_SECONDS))
        yield port
    finally:
        stop(proc)


def wait_for_port(proc: subprocess.Popen[Any], port: int, log: Path, deadline: float) -> None:
    while True:
        if proc.poll() is not None:
            raise RunProblem("error", f"server exited ({proc.returncode}) before listening: {log_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RunProblem("timeout", f"server not listening on port {port} in time: {log_tail(log)}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after 10 s."""
    lifeline.stop_group(proc, grace=10)


def log_tail(log: Path) -> str:
    try:
        return tail(log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "(no log)"


class RunProblem(Exception):
    """A run that produced no report: ``status`` is "timeout" or "error"."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

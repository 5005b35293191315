"""Engines and servers a test run starts die with it, even when it is killed outright.

A real pytest run (a subprocess) starts an engine through the ``cmd`` adapter and
a server through ``impl.process.lifeline.spawn`` (what the http tests' llama-cpp-python
server fixture uses); neither reads its stdin, so neither would notice the run's
end by itself. The run is then ``SIGKILL``-ed, as the kernel's OOM killer does, and
no process carrying the run's marker may remain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "SPECGATE_ORPHAN_MARKER"

HELLO = {"protocol": "specgate-jsonl/1", "engine": "sleeper", "version": "0", "capabilities": ["encode"]}
# An engine that says hello and then sleeps without reading its stdin.
SLEEPER = f"import json, time; print(json.dumps({HELLO!r}), flush=True); time.sleep(600)"

INNER_TEST = textwrap.dedent(
    f"""
    import os, shlex, subprocess, sys, time
    from pathlib import Path

    from impl.process import lifeline
    from impl.process.client import CmdEngine


    def test_start_an_engine_and_a_server_then_wait():
        server = lifeline.spawn(
            [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        engine = CmdEngine(shlex.join([sys.executable, "-c", {SLEEPER!r}]))
        assert engine.capabilities == {{"encode"}}  # started and said hello
        Path(os.environ["ORPHAN_READY"]).write_text(f"{{server.pid}} {{engine._proc.pid}}")
        time.sleep(600)
    """
)


def marked_processes(marker: str) -> dict[int, str]:
    """Live (not zombie) processes whose environment carries the marker: pid -> argv."""
    found = {}
    needle = f"{MARKER}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z":
            found[int(entry.name)] = argv.strip()
    return found


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_a_killed_run_leaves_no_engine_or_server_behind(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    ready = tmp_path / "ready"
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    env = {
        **os.environ,
        MARKER: marker,
        "ORPHAN_READY": str(ready),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        "test_inner.py",
    ]
    run = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if not wait_for(lambda: ready.exists() or run.poll() is not None, 60) or not ready.exists():
            run.kill()
            raise AssertionError(
                f"the inner run did not start its children:\n{run.communicate()[0].decode()[-3000:]}"
            )
        children = {int(pid) for pid in ready.read_text().split()}
        assert children <= set(marked_processes(marker)), "the marker does not find the children it must find"
    finally:
        run.send_signal(signal.SIGKILL)  # as the OOM killer does: no cleanup code runs
        run.wait()

    survivors: dict[int, str] = {}
    # Gone as soon as the kernel's parent-death signal is handled; 60 s only bounds the
    # wait (a saturated machine may take seconds to reap them; an orphan never goes).
    if not wait_for(lambda: not marked_processes(marker), 60):
        survivors = marked_processes(marker)
        for pid in survivors:  # clean up before failing
            os.kill(pid, signal.SIGKILL)
    assert not survivors, "left running after the run was killed:\n" + json.dumps(
        {pid: argv[:200] for pid, argv in survivors.items()}, indent=1
    )


# An engine that double-forks a grandchild into a session of its own (``setsid``), which
# writes its pid and sleeps; the engine then says hello and answers as the toy does.
DOUBLE_FORKER = textwrap.dedent(
    f"""
    import json, os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(sys.argv[1], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    print(json.dumps({HELLO!r}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            break
        print(json.dumps({{"id": request["id"], "result": [1]}}), flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_setsid_grandchild_of_an_engine_dies_with_it(tmp_path: Path) -> None:
    """A grandchild that left the engine's process group and session is killed when the
    engine is closed (issue 38: it outlived the run)."""
    import shlex

    from impl.process.client import CmdEngine
    from impl.protocol import ModelRef

    pid_file = tmp_path / "grandchild"
    engine = CmdEngine(shlex.join([sys.executable, "-c", DOUBLE_FORKER, str(pid_file)]), timeout=60)
    try:
        assert engine.encode(ModelRef("m", Path("/nonexistent.gguf"), "ab" * 32), "a", False) == [1]
        for _ in range(600):  # the grandchild writes its pid at once; 60 s only on a stalled machine
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        grandchild = int(pid_file.read_text())
        assert _alive(grandchild) and os.getsid(grandchild) != os.getsid(engine._proc.pid)
    finally:
        engine.close()
    for _ in range(100):  # SIGKILL is immediate; the reaper (init) may take a moment
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    alive = _alive(grandchild)
    if alive:
        os.kill(grandchild, signal.SIGKILL)  # no orphan left behind by this test either
    assert not alive, f"the engine's setsid grandchild {grandchild} outlived it"

"""Throwaway engine folders for the runner's and the CI sample's own tests, written
into a temp dir: the oracle served through the protocol, an adapter that exits at
once, one that hangs, a package version no index has."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SPECGATE_VERSION = importlib.metadata.version("specgate")

ORACLE = "cmd:{python} -m specgate.cli engine --impl oracle"
EXITS_AT_ONCE = "cmd:{python} -c 'raise SystemExit(3)'"


def engine_folder(
    root: Path,
    key: str,
    impl: str,
    *,
    package: str = "specgate",
    version: str = SPECGATE_VERSION,
    stages: tuple[str, ...] = ("split", "encode"),
    models: tuple[str, ...] = ("qwen3-vocab",),
    max_cases: int = 3,
) -> Path:
    """An engine folder ``root/key`` whose engine.toml gates ``impl`` (the installed
    specgate stands in for the package: already installed, nothing to fetch)."""
    folder = root / key
    folder.mkdir(parents=True)
    listed = ", ".join(f'"{s}"' for s in stages)
    chosen = ", ".join(f'"{m}"' for m in models)
    (folder / "engine.toml").write_text(
        f'name = "{key}"\npackage = "{package}"\nversion = "{version}"\ninstaller = "pip"\n'
        f"impl = {impl!r}\nstages = [{listed}]\nmodels = [{chosen}]\n"
        f"[ci]\nmodels = [{chosen}]\nmax_cases = {max_cases}\n",
        encoding="utf-8",
    )
    return folder


def hanging_adapter(root: Path) -> str:
    """``impl`` of an adapter that writes its pid to ``root/hang.pid`` and never answers."""
    script = root / "hang.py"
    script.write_text(
        f"import os, time\nopen({str(root / 'hang.pid')!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n",
        encoding="utf-8",
    )
    return f"cmd:{{python}} {script}"


def engine_unavailable(why: str) -> None:
    """An engine package, its node_modules or the model file a confirm script needs is
    missing: a failure under ``--live-references`` (``nox -s live`` installs every
    engine, so there it means an install went wrong), else a skip that says why."""
    from specgate.plugin import setup_missing

    setup_missing(why, remedy="nox -s live installs it: see reports/ecosystem-install.json")


#: A protocol engine whose every encode answer is [0]: each gated case fails, one root cause.
WRONG_ADAPTER = """import json, sys
print(json.dumps({"protocol": "specgate-jsonl/1", "engine": "wrong", "version": "1",
                  "capabilities": ["encode"]}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "shutdown":
        break
    print(json.dumps({"id": request["id"], "result": [0]}), flush=True)
"""


#: The first encode case the wrong engine's gate run asks (``--max-cases 3`` on qwen3-vocab):
#: its confirm entry names the group that holds it.
FIRST_ENCODE_CASE = "qwen3-vocab/arabic/plain"


def wrong_engine(root: Path, key: str, confirm_says: str | None = None) -> Path:
    """An engine folder whose adapter answers every encode with [0]; with ``confirm_says``
    ("REPRODUCES" or "GONE") a confirm script printing that verdict for the divergence
    "encode answers [0]", which ``[[confirm.groups]]`` ties to the encode failures."""
    folder = engine_folder(root, key, "cmd:{python} {here}/adapter.py", stages=("encode",))
    (folder / "adapter.py").write_text(WRONG_ADAPTER, encoding="utf-8")
    if confirm_says is not None:
        (folder / "confirm.py").write_text(
            f"print({confirm_says + ': encode answers [0]: engine [0] vs reference [9707]'!r})\n"
            f"raise SystemExit({0 if confirm_says == 'REPRODUCES' else 1})\n",
            encoding="utf-8",
        )
        with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
            toml.write(
                '[confirm]\ncommand = "{python} {here}/confirm.py"\n[[confirm.groups]]\nstage = "encode"\n'
                f"cases = [{FIRST_ENCODE_CASE!r}]\n"
                'divergences = ["encode answers [0]"]\n'
            )
    return folder


def unavailable_engine(root: Path, key: str) -> Path:
    """An engine folder that says it cannot run here: a row, never installed or gated."""
    folder = engine_folder(root, key, ORACLE)
    text = (folder / "engine.toml").read_text(encoding="utf-8")
    (folder / "engine.toml").write_text(
        text.replace("[ci]", 'unavailable = "needs a GPU this machine lacks"\n[ci]'), encoding="utf-8"
    )
    return folder


def assert_entries_reproduce(engine: str, stdout: str) -> None:
    """Every divergence named by ``engine``'s ``[[confirm.groups]]`` entries starts a line its
    confirm script printed as REPRODUCES (``confirm.verdicts``): what the table marks
    *confirmed* is what the script really printed, not a name that matches nothing."""
    from specgate.ecosystem.confirm import ConfirmRun, parse, verdicts
    from specgate.ecosystem.spec import ECOSYSTEM_DIR, EngineSpec

    run = ConfirmRun("confirm", "ran", 0, parse(stdout))
    spec = EngineSpec.load(ECOSYSTEM_DIR / engine)
    said = {n: verdicts(run, n) for e in spec.confirm_groups for n in e.divergences}
    assert said and set(said.values()) == {"REPRODUCES"}, (said, stdout)


def confirm_on_the_real_model(engine: str) -> list[str]:
    """Run ``impl/ecosystem/<engine>/confirm.py --model`` on the cached 0.5B model (skipped,
    saying why, when it is not cached); its exit status must be 0; its output lines."""
    import subprocess
    import sys

    from specgate.ecosystem.spec import ECOSYSTEM_DIR
    from specgate.supply import models as model_cache

    try:
        gguf = model_cache.model_ref("qwen2.5-coder-0.5b-instruct").gguf
    except model_cache.ModelError as exc:
        engine_unavailable(str(exc))
    script = ECOSYSTEM_DIR / engine / "confirm.py"
    run = subprocess.run(
        [sys.executable, str(script), "--model", str(gguf)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    return run.stdout.splitlines()

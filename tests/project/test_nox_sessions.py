"""The nox sessions as a user meets them: plain ``nox`` runs the main job (parity), and an
engine's own Python package installs into the parity session with ``--install``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOX = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]


def test_plain_nox_runs_the_parity_session() -> None:
    pytest.importorskip("nox")
    listing = subprocess.run([*NOX, "-l"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    defaults = [line.split()[1] for line in listing.stdout.splitlines() if line.startswith("* ")]
    assert defaults == ["parity"], listing.stdout[-2000:]


ADAPTER = '''
from impl.oracle import OracleEngine


class Engine(OracleEngine):
    """The oracle's tokenizer under another name: an engine package the user wrote."""

    name = "mypkg"
    capabilities = frozenset({"encode"})
'''


@pytest.mark.slow  # a fresh nox venv (pip from its cache) and a short parity run: ~1-3 min
def test_parity_install_puts_an_engines_package_in_the_session(tmp_path: Path) -> None:
    pytest.importorskip("nox")
    package = tmp_path / "mypkg-src"
    (package / "mypkg").mkdir(parents=True)
    (package / "mypkg" / "__init__.py").write_text("")
    (package / "mypkg" / "adapter.py").write_text(textwrap.dedent(ADAPTER))
    (package / "pyproject.toml").write_text(
        '[project]\nname = "mypkg"\nversion = "0.1"\n[tool.setuptools]\npackages = ["mypkg"]\n'
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the point: no PYTHONPATH
    reports = tmp_path / "reports"
    args = ["--install", str(package), "--impl", "mypkg.adapter:Engine", "--stages", "encode"]
    args += ["--models", "qwen3-vocab", "--max-cases", "3", "--report-dir", str(reports)]
    proc = subprocess.run(
        [*NOX, "--envdir", str(tmp_path / "envs"), "-s", "parity", "--", *args],
        cwd=tmp_path,  # not the checkout: nothing importable from the working directory
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert list(reports.glob("parity-*.md")), out[-4000:]
    assert "3 passed" in out or "passed" in out, out[-4000:]


@pytest.mark.parametrize(
    ("impl", "args", "workers"),
    [
        (None, [], 2),  # plain `nox`: the oracle, the main job
        ("oracle", ["--stages", "logits"], 2),
        ("cmd:my-engine --specgate", [], 0),  # an engine under test: one process asks it
        ("http:http://127.0.0.1:8080", [], 0),
        ("mypkg.adapter:Engine", [], 0),
        ("hf", [], 0),
        (None, ["-n", "1"], 0),  # the user's own choice stands
        (None, ["-n4"], 0),
        ("oracle", ["--numprocesses=3"], 0),
        ("oracle", ["--numprocesses", "auto"], 0),
    ],
)
def test_the_main_job_runs_two_workers_only_for_the_oracle_itself(impl, args, workers, monkeypatch) -> None:
    pytest.importorskip("nox")
    sys.path.insert(0, str(ROOT))
    try:
        import noxfile
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert noxfile.oracle_workers(impl, args) == workers
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one core: nothing to share
    assert noxfile.oracle_workers(impl, args) == 0

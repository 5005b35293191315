"""``specgate parity`` is the gate run, from any directory and from an installed wheel:
the gates (``specgate/gates``), the corpus, the snapshots and the schemas travel with the
package (``impl/datafiles.py`` finds them), the directory it runs in lends it no pytest
configuration, and an engine is judged the same way — green for the oracle, red for a
planted wrong engine — with the reports in ``./reports``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from impl.datafiles import DATA_FOLDERS, DATA_ROOT, data_root
from impl.process import lifeline
from specgate.plugin import model_missing
from specgate.run.scheduling import BLAS_THREAD_VARIABLES, blas_threads
from specgate.supply import models as model_cache
from tests.light_install import LightInstall

ROOT = Path(__file__).resolve().parents[2]
VOCAB = "qwen3-vocab"
SELECTION = ["--stages", "encode", "--models", VOCAB]

#: A planted wrong engine: the oracle's encode with every id one too high.
WRONG_IDS = """
import sys

from impl.oracle import OracleEngine
from impl.process.server import serve


class WrongIds(OracleEngine):
    name = "wrong-ids"

    def encode(self, model, text, parse_special):
        return [i + 1 for i in super().encode(model, text, parse_special)]


sys.exit(serve(WrongIds()))
"""

#: What a directory's own pytest configuration would do to a gate run that read it.
HOSTILE_CONFIG = {
    "pytest.ini": "[pytest]\naddopts = --no-such-option\n",
    "conftest.py": "raise RuntimeError('the directory the run starts in lent it its conftest')\n",
}


@pytest.fixture(scope="module")
def vocab() -> None:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch")


def parity(
    python: Path | str, cwd: Path, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cmd = [str(python), "-m", "specgate", "parity", "-q", *args]
    return lifeline.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def planted(folder: Path, python: Path | str) -> str:
    script = folder / "wrong_ids.py"
    script.write_text(WRONG_IDS, encoding="utf-8")
    return f"cmd:{python} {script}"


def report_of(folder: Path, stem_start: str) -> dict:
    found = sorted((folder / "reports").glob(f"parity-{stem_start}*.json"))
    assert len(found) == 1, (
        sorted((folder / "reports").glob("*")) if (folder / "reports").exists() else "no reports/"
    )
    return json.loads(found[0].read_text(encoding="utf-8"))


def check_green_and_red(python: Path | str, folder: Path, *extra: str) -> None:
    """The oracle green and a planted wrong engine red, each run from ``folder`` (which
    holds a hostile pytest configuration), the reports in ``folder/reports``."""
    for name, text in HOSTILE_CONFIG.items():
        (folder / name).write_text(text, encoding="utf-8")
    green = parity(python, folder, "--impl", "oracle", *SELECTION, *extra)
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr[-3000:]
    report = report_of(folder, "oracle")
    outcomes = {c["outcome"] for c in report["cases"]}
    assert report["cases"] and outcomes <= {"pass", "reference-disagreement"}, outcomes
    assert all(
        c["nodeid"].startswith("specgate/gates/test_tokenizer.py::test_encode[") for c in report["cases"]
    )
    assert {p.suffix for p in (folder / "reports").glob("parity-oracle*")} >= {
        ".md",
        ".json",
        ".html",
        ".xml",
    }

    red = parity(
        python, folder, "--impl", planted(folder, python), *SELECTION, *extra, "--shrink-budget", "5"
    )
    assert red.returncode == 1, red.stdout[-3000:] + red.stderr[-3000:]
    cases = report_of(folder, "cmd")["cases"]
    passed = [c["nodeid"] for c in cases if c["outcome"] != "fail"]
    # The empty text's ids, [], have nothing to shift: the one case the planted engine gets right.
    assert cases and all("/ws-empty/" in nodeid for nodeid in passed), passed


def test_the_data_is_found_in_one_place(tmp_path: Path) -> None:
    """A checkout's root holds the data folders; anywhere else (site-packages) they are the
    package's ``specgate/_data``. Every reader goes through ``DATA_ROOT``."""
    from impl import ops
    from impl.text import inputs
    from specgate.run import shard
    from specgate.upkeep import corpus, snapshots

    checkout = tmp_path / "checkout"
    for name in DATA_FOLDERS:
        (checkout / name).mkdir(parents=True)
    assert data_root(checkout) == checkout / "specgate" / "_data"  # folders alone: not a checkout
    (checkout / "pyproject.toml").write_text("[project]\n", encoding="utf-8")
    assert data_root(checkout) == checkout
    site = tmp_path / "site-packages"
    (site / "specgate").mkdir(parents=True)
    assert data_root(site) == site / "specgate" / "_data"

    assert DATA_ROOT == ROOT
    readers = [
        snapshots.SNAPSHOT_ROOT, corpus.CORPUS, shard.COSTS, model_cache.MANIFEST, ops.PROTOCOL_DIR, inputs.CORPUS
    ]  # fmt: skip
    assert all(path.is_relative_to(DATA_ROOT) and path.exists() for path in readers), readers


@pytest.mark.slow  # two gate runs with triage: ~20 s on a quiet machine
def test_specgate_parity_runs_from_any_directory(tmp_path: Path, vocab: None) -> None:
    """From a directory whose pytest.ini and conftest.py would break a pytest run: the
    oracle green (exit 0, reports in ./reports, node ids of the packaged gates), a planted
    wrong engine red (exit 1, every case failed), a few cases each."""
    check_green_and_red(sys.executable, tmp_path, "--max-cases", "6")


def test_a_usage_error_of_specgate_parity_is_one_line(tmp_path: Path) -> None:
    proc = parity(sys.executable, tmp_path, "--impl", "oracle", "--stages", "tokenize")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "unknown stage(s) tokenize" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow  # builds the wheel, a fresh virtualenv and installs the light dependencies: minutes
def test_the_wheel_carries_the_gates_and_their_data(light_install: LightInstall, vocab: None) -> None:
    """``pip install <checkout>`` (a wheel, not editable) in a fresh virtualenv outside the
    checkout, with the light dependencies only (no torch): from an empty directory,
    ``specgate parity --impl oracle --stages encode --models qwen3-vocab`` is green over
    every case and a planted wrong engine is red."""
    wheel, python, empty = light_install.wheel, light_install.python, light_install.empty
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in [
        "specgate/gates/test_tokenizer.py", "specgate/gates/conftest.py", "specgate/schemas/reproducer.schema.json",
        "specgate/_data/corpus/models.toml", f"specgate/_data/snapshots/{VOCAB}/encode.json",
        "specgate/_data/protocol/handshake.schema.json",
    ]:  # fmt: skip
        assert name in names, name
    assert not any(n.startswith(("tests/", "specgate/_data/snapshots/__pycache__")) for n in names)
    size = wheel.stat().st_size
    assert size < 20_000_000, (
        f"the wheel is {size / 1e6:.1f} MB"
    )  # 10.8 MB when written: snapshots 21 MB unpacked
    where = lifeline.run(
        [str(python), "-c", "import specgate, impl.datafiles as d; print(specgate.__file__); print(d.DATA_ROOT)"],
        cwd=empty, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert str(ROOT) not in where.stdout and where.stdout.count(str(light_install.venv)) == 2, (
        where.stdout + where.stderr
    )
    assert lifeline.run([str(python), "-c", "import torch"], capture_output=True, timeout=120).returncode != 0
    check_green_and_red(python, empty)


def test_specgate_parity_help_shows_its_own_options_and_pytests_behind_a_flag() -> None:
    """``--help`` is specgate's options only (issue 35: pytest's 401 lines hid them from
    line 188); ``--pytest-help`` gives pytest's, specgate's among them. Neither needs a
    model in the cache."""

    def run(*args: str) -> str:
        cmd = [sys.executable, "-m", "specgate", "parity", *args]
        proc = lifeline.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout

    own = run("--help").splitlines()
    assert own[0].startswith("usage: specgate parity --impl NAME"), own[:3]
    impl = next(i for i, line in enumerate(own) if line.strip().startswith("--impl"))
    assert impl < 15, own[:20]
    text = "\n".join(own)
    for option in (
        "--models",
        "--stages",
        "--diagnose-budget",
        "--shrink-budget",
        "--report-dir",
        "--pytest-help",
    ):
        assert option in text, option
    assert "--capture" not in text and "--strict-markers" not in text, "pytest's own options are not shown"
    assert len(own) < 120, len(own)
    assert run("-h").splitlines() == own
    everything = run("--pytest-help")
    assert "--capture" in everything and "--impl" in everything and "--diagnose-budget" in everything


@pytest.mark.parametrize(
    ("workers", "cpus", "environ", "expected"),
    [
        (0, 2, {}, {}),  # one process: its BLAS takes every core
        (1, 2, {}, {}),
        (2, 2, {}, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}),
        (2, 8, {}, {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "4"}),
        (3, 8, {}, {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}),
        (4, 2, {}, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}),
        (2, 2, {"OPENBLAS_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "1"}),  # the caller's choice stays
    ],
)
def test_the_gate_runs_workers_share_the_cores_between_their_blas_threads(workers, cpus, environ, expected):
    assert blas_threads(workers, cpus, environ) == expected


#: Loaded by every worker of the run below (``-p``): each one writes down its BLAS threads.
THREADS_REPORTER = """
import os, pathlib

def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    out = pathlib.Path(os.environ["THREADS_SEEN"]) / worker
    out.write_text(os.environ.get("OPENBLAS_NUM_THREADS", "unset"), encoding="utf-8")
"""


def test_two_workers_of_the_command_itself_run_one_blas_thread_each(tmp_path, vocab):
    (tmp_path / "threads_reporter.py").write_text(THREADS_REPORTER, encoding="utf-8")
    seen = tmp_path / "seen"
    seen.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", *BLAS_THREAD_VARIABLES)
    }
    env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", THREADS_SEEN=str(seen))
    cmd = [sys.executable, "-m", "specgate", "parity", "-q", "-p", "threads_reporter", "-n", "2", *SELECTION]
    proc = lifeline.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    expected = str(max(1, (os.cpu_count() or 1) // 2))
    workers = {p.name: p.read_text(encoding="utf-8") for p in seen.iterdir() if p.name.startswith("gw")}
    assert workers == {"gw0": expected, "gw1": expected}, workers

"""A missing optional piece is one line naming what to install, exit 4 — run for real in
a light install: specgate's core and the report extra, no torch, no transformers, no
llama-cpp-python. The one ``nox -s parity`` makes (``.nox/parity``) where it exists,
else this checkout's wheel in a fresh virtualenv (``tests/light_install.py``, built once
per session and shared with the wheel test): so CI, which makes no ``.nox/parity``, runs
them too. Slow: the wheel and its virtualenv take minutes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIGHT = ROOT / ".nox" / "parity" / "bin"


pytestmark = pytest.mark.slow


def without_torch(bin_dir: Path) -> bool:
    probe = subprocess.run(
        [bin_dir / "python", "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.stdout.strip() == "True"


@pytest.fixture(scope="module")
def light(request: pytest.FixtureRequest) -> Path:
    if (LIGHT / "python").exists() and without_torch(LIGHT):
        return LIGHT
    built = request.getfixturevalue("light_install").bin
    assert without_torch(built), f"{built} has torch: not a light install"
    return built


@pytest.mark.parametrize(("impl", "extra"), [("hf", "hf"), ("llamacpp", "llamacpp")])
def test_specgate_engine_without_its_extra_is_one_line(light: Path, impl: str, extra: str) -> None:
    proc = subprocess.run(
        [light / "specgate", "engine", "--impl", impl], input="", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 4, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'specgate[{extra}]'" in lines[0], proc.stderr[-2000:]
    assert proc.stdout == ""  # no handshake: nothing for a client to mistake for an engine


def test_parity_with_impl_hf_in_the_light_install_is_one_setup_error(light: Path) -> None:
    proc = subprocess.run(
        [light / "specgate", "parity", "--impl", "hf", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    errors = [line for line in out.splitlines() if "specgate[hf]" in line]
    assert len(errors) == 1 and "Traceback" not in out and len(out.splitlines()) < 10, out[-3000:]

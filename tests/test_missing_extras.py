"""A missing optional piece is one line naming what to install, exit 4 — run for real in
the light install that ``nox -s parity`` makes (``.nox/parity``: specgate's core and the
report extra, no torch, no transformers, no llama-cpp-python)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIGHT = ROOT / ".nox" / "parity" / "bin"


@pytest.fixture(scope="module")
def light() -> Path:
    if not (LIGHT / "python").exists():
        pytest.skip("no light install here: make it with `nox -s parity --install-only`")
    probe = subprocess.run(
        [LIGHT / "python", "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.stdout.strip() != "True":
        pytest.skip(f"{LIGHT} has torch installed: not the light install")
    return LIGHT


@pytest.mark.parametrize(("impl", "extra"), [("hf", "hf"), ("llamacpp", "llamacpp")])
def test_specgate_engine_without_its_extra_is_one_line(light: Path, impl: str, extra: str) -> None:
    proc = subprocess.run(
        [light / "specgate", "engine", "--impl", impl], input="", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 4, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'specgate[{extra}]'" in lines[0], proc.stderr[-2000:]
    assert proc.stdout == ""  # no handshake: nothing for a client to mistake for an engine


@pytest.mark.slow  # pytest's collection in a subprocess (~15 s on a busy machine)
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

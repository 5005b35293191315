"""specgate as a user installs it: a wheel built from this checkout, installed (not
editable) in a fresh virtualenv outside the checkout with the light dependencies only —
no torch, no transformers, no llama-cpp-python. Built once per test session (the
``light_install`` fixture of ``tests/conftest.py``): the wheel test and the missing-extras
tests run in the same install."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from impl.process import lifeline

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LightInstall:
    wheel: Path
    venv: Path
    empty: Path  # a directory outside the checkout to run from

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


class BuildFailed(AssertionError):
    pass


def build(folder: Path) -> LightInstall:
    """Build the wheel and install it with the lock's constraints into ``folder/venv``."""
    wheels, venv, empty = folder / "wheels", folder / "venv", folder / "empty"
    empty.mkdir(parents=True)
    made = lifeline.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if made.returncode != 0:
        raise BuildFailed(made.stdout[-3000:] + made.stderr[-3000:])
    (wheel,) = wheels.glob("specgate-*.whl")
    lifeline.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = lifeline.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c",
         str(ROOT / "constraints" / "references.txt"), str(wheel)],
        cwd=empty, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if install.returncode != 0:
        raise BuildFailed(install.stdout[-3000:] + install.stderr[-3000:])
    return LightInstall(wheel, venv, empty)

"""``specgate parity --impl X [--models ...] [--stages ...] [any gate or pytest option]``:
the stage gates run from the installed package, in any directory.

The gates are ``specgate/gates/`` (package modules, collected by pytest from wherever
specgate is installed); the corpus, snapshots and schemas they read are the package's
data (``impl/datafiles.py``). pytest is run with no configuration file (``-c`` the null
device: a ``pytest.ini`` or ``pyproject.toml`` of the directory it is started in does not
apply), rooted above the package (node ids read ``specgate/gates/test_x.py::...`` in a
checkout and in a wheel alike), with conftest files from ``specgate/gates`` down only,
the specgate plugin, and ``--parity-junit``. Options, exit statuses (0 green, 1 a gate
failed, 4 a usage or setup error, ...) and the reports in ``--report-dir`` (default
``./reports``) are the gate run's own; ``nox -s parity`` runs this command.
"""

from __future__ import annotations

import os
from pathlib import Path

GATES = Path(__file__).resolve().parent / "gates"


def pytest_args(args: list[str]) -> list[str]:
    """pytest's command line for ``specgate parity ARGS``: the fixed part, then ARGS."""
    return [
        str(GATES),
        "-c", os.devnull,
        "--rootdir", str(GATES.parents[1]),
        "--confcutdir", str(GATES),
        "-p", "specgate.plugin",
        "-p", "no:cacheprovider",
        "-p", "no:syrupy",
        "-ra",
        "--strict-markers",
        "--parity-junit",
        *args,
    ]  # fmt: skip


def main(args: list[str]) -> int:
    import pytest

    return int(pytest.main(pytest_args(args)))

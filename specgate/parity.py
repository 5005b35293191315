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

``--help`` (``-h``) prints specgate's own options only (``help_text``); pytest's
options, which the command line also takes, are printed by ``--pytest-help``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

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


class _Group:
    """Stands in for pytest's option group: ``specgate.run.options`` adds its options to
    an argparse parser, so the help shows the very options the run takes."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.parser.add_argument(*names, **kwargs)

    def getgroup(self, name: str) -> _Group:
        return self


def help_text() -> str:
    """specgate parity's own options, as ``--help`` prints them."""
    from specgate.run.options import add_options

    parser = argparse.ArgumentParser(
        prog="specgate parity",
        usage="specgate parity --impl NAME [--models ...] [--stages ...] [options] [pytest options]",
        description="Gate an engine stage by stage against the recorded references; the matrix and the "
        "reports (Markdown, JSON, HTML, JUnit) go to --report-dir. Exit status: 0 green, 1 a gate "
        "failed, 4 a usage or setup error.",
        epilog="pytest's own options (-k, -x, -n, --strict, ...) are taken too: --pytest-help lists them.",
        add_help=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="this help")
    parser.add_argument(
        "--pytest-help", action="store_true", help="pytest's options, which this command also takes"
    )
    add_options(_Group(parser))  # type: ignore[arg-type]
    return parser.format_help()


def main(args: list[str]) -> int:
    import pytest

    if "--pytest-help" in args:
        return int(pytest.main(pytest_args(["--help", *(a for a in args if a != "--pytest-help")])))
    if "-h" in args or "--help" in args:
        print(help_text(), end="")
        return 0
    return int(pytest.main(pytest_args(args)))

"""A pytest plugin for a gate run under test (``-p tests.run.report_writers``): it only
looks, writing one line per call of ``parity_report.write_reports`` — which process made
it (the pytest-xdist worker's id, or ``controller``; from the run's own config, not the
environment, which a test run under xdist passes on) — to ``$SPECGATE_TEST_WRITERS``."""

from __future__ import annotations

import functools
import os

from specgate.reports import parity_report


def pytest_configure(config) -> None:
    write_reports = parity_report.write_reports
    role = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"

    @functools.wraps(write_reports)
    def noting(*args, **kwargs):
        with open(os.environ["SPECGATE_TEST_WRITERS"], "a", encoding="utf-8") as log:
            log.write(role + "\n")
        return write_reports(*args, **kwargs)

    parity_report.write_reports = noting

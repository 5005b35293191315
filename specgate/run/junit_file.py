"""``--parity-junit``'s file written as every report file is (``files.write_text``):
pytest's own JUnit writer opens the final path and writes into it, so a full disk left
a truncated XML file and an INTERNALERROR (exit 3) before any other report was written.
Here pytest writes it to a temporary file beside the final one, which is renamed over
it once whole; a failure removes the temporary file and is kept as one line that the
run's summary reports (``ERROR:``, exit status 4) after the other reports."""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import pytest


def make_atomic(config: pytest.Config) -> None:
    """Give the run's ``LogXML`` plugin (when ``--junitxml``/``--parity-junit`` made one)
    a ``pytest_sessionfinish`` that writes atomically: an attribute of that one object,
    re-registered so pluggy calls it (its class stays pytest's own)."""
    from _pytest import junitxml

    xml = config.stash.get(junitxml.xml_key, None)
    if xml is None or hasattr(xml, "write_error"):
        return
    write = type(xml).pytest_sessionfinish

    def pytest_sessionfinish(self: Any) -> None:
        final = self.logfile
        tmp = os.path.join(
            os.path.dirname(os.path.abspath(final)), f".{os.path.basename(final)}.{os.getpid()}.tmp"
        )
        self.logfile = tmp
        try:
            write(self)
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self.write_error = f"cannot write {final}: {exc.strerror or exc}"
        finally:
            self.logfile = final

    config.pluginmanager.unregister(xml)
    xml.pytest_sessionfinish = types.MethodType(pytest_sessionfinish, xml)
    xml.write_error = ""
    config.pluginmanager.register(xml)


def write_error(config: pytest.Config) -> str:
    """The line saying why the JUnit file could not be written, or ``""``."""
    from _pytest import junitxml

    return getattr(config.stash.get(junitxml.xml_key, None), "write_error", "")

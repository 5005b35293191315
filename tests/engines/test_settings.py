"""Every numeric ``SPECGATE_*`` setting is checked where a run or a command starts: a
bad value is one line naming it (exit status 4), never a traceback where it is first
read (``SPECGATE_LLAMA_THREADS=x`` once raised a ValueError at import) and never a
value ignored until some reference happens to read it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from impl import envvars

ROOT = Path(__file__).resolve().parents[2]
BAD = {"x", "-3", "0", "1e999", ""}


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_the_llamacpp_adapter_imports_whatever_the_setting_says():
    done = run([sys.executable, "-c", "import impl.llamacpp.engine"], {"SPECGATE_LLAMA_THREADS": "x"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_bad_llama_threads_stops_a_run_with_one_line():
    """Even a run that gates the oracle (no llama.cpp involved) stops: the setting is wrong."""
    done = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "specgate/gates/test_tokenizer.py", "-q"],
        {"SPECGATE_LLAMA_THREADS": "x"},
    )
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "SPECGATE_LLAMA_THREADS='x'" in done.stderr and "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("name", sorted(envvars.NUMERIC))
def test_every_numeric_setting_is_one_line_from_the_command_line(name):
    bad = "x" if name != "SPECGATE_CMD_LOGITS_TOP_K" else "-1"
    done = run([sys.executable, "-m", "specgate.cli", "models", "list"], {name: bad})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 4 and lines == [lines[0]] and f"{name}={bad!r}" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_numeric_settings_are_every_one_the_code_reads():
    """NUMERIC is the whole list: every ``SPECGATE_*`` read through envvars is in it."""
    import re

    read = set()
    for path in [*ROOT.joinpath("impl").rglob("*.py"), *ROOT.joinpath("specgate").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        read |= set(re.findall(r"env_(?:seconds|count|whole)\(\s*\"(SPECGATE_[A-Z_]+)\"", text))
        read |= set(re.findall(r"environ\.get\(\"(SPECGATE_[A-Z_]+)\", \"\d+\"\)", text))
    assert read and read <= set(envvars.NUMERIC), read - set(envvars.NUMERIC)


@pytest.mark.parametrize("value", sorted(BAD))
def test_llama_threads_is_read_as_a_positive_count(monkeypatch, value):
    monkeypatch.setenv("SPECGATE_LLAMA_THREADS", value)
    with pytest.raises(Exception, match="SPECGATE_LLAMA_THREADS"):
        envvars.check_all()

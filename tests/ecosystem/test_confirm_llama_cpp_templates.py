"""The divergences of llama.cpp's two template paths still reproduce with the pinned
llama-cpp-python: `impl/ecosystem/llama_cpp_chat_format/confirm.py` (its Jinja2ChatFormatter)
and `impl/ecosystem/llama_cpp_builtin_template/confirm.py` (llama_chat_apply_template) exit 0,
each divergence printed as REPRODUCES (2 when a model file is not cached: skipped, or a
failure under --live-references)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

ECOSYSTEM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem"
MISSING_MODEL = 2


@pytest.mark.parametrize(
    ("engine", "divergences"), [("llama_cpp_chat_format", 2), ("llama_cpp_builtin_template", 4)]
)
def test_llama_cpp_template_divergences_reproduce(engine: str, divergences: int) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        engine_unavailable("llama-cpp-python is not installed (nox -s tests installs it)")
    run = subprocess.run(
        [sys.executable, str(ECOSYSTEM / engine / "confirm.py")], capture_output=True, text=True, timeout=300
    )
    if run.returncode == MISSING_MODEL:
        engine_unavailable(f"{engine}: a model file confirm.py needs is not cached: {run.stdout.strip()}")
    assert run.returncode == 0, (
        f"{engine}/confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    )
    assert run.stdout.count("REPRODUCES") == divergences, run.stdout
    assert_entries_reproduce(engine, run.stdout)

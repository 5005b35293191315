"""The tinygrad divergences of impl/ecosystem/tinygrad/confirm.py still reproduce with the
pinned package, through the tokenizer tinygrad's LLM app builds from a GGUF (its decode of a
piece inside a UTF-8 character, around a special token, of a [PAD] filler and of an unknown
id; its Qwen3.6 merges). It reads qwen3-vocab and qwen3.6-vocab from specgate's model cache."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

pytestmark = pytest.mark.live  # the engine package comes with the live session (nox -s live)
CONFIRM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem" / "tinygrad" / "confirm.py"
MISSING_FILE = 2  # confirm.py's exit status when a GGUF is not there


def test_tinygrad_divergences_reproduce():
    from specgate.supply import models as model_cache

    if importlib.util.find_spec("tinygrad") is None:
        engine_unavailable("the tinygrad package is not installed (pip install tinygrad==0.13.0)")
    try:
        qwen3 = model_cache.model_ref("qwen3-vocab").gguf
        qwen36 = model_cache.model_ref("qwen3.6-vocab").gguf
    except model_cache.ModelError as exc:
        engine_unavailable(str(exc))
    run = subprocess.run(
        [sys.executable, str(CONFIRM), "--model", str(qwen3), "--qwen36", str(qwen36)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode == MISSING_FILE:
        engine_unavailable(f"a GGUF confirm.py needs is not cached: {run.stdout.strip()}")
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    lines = run.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("REPRODUCES") for line in lines), lines
    assert_entries_reproduce("tinygrad", run.stdout)

"""The mistral.rs divergences of impl/ecosystem/mistralrs/confirm.py still reproduce with the
pinned package, through mistral.rs's own Python API on the 0.5B model (its decode of a piece
inside a UTF-8 character and of the [PAD] fillers; a stop string completed by the last
allowed token is no stop)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.supply import models as model_cache
from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

pytestmark = pytest.mark.live  # mistral.rs loads the 0.5B model's weights (~1-2 min, ~1.4 GB)
CONFIRM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem" / "mistralrs" / "confirm.py"


def test_mistralrs_divergences_reproduce():
    if importlib.util.find_spec("mistralrs") is None:
        engine_unavailable("the mistralrs package is not installed (pip install mistralrs==0.9.5)")
    try:
        gguf = model_cache.model_ref("qwen2.5-coder-0.5b-instruct").gguf
    except model_cache.ModelError as exc:
        engine_unavailable(str(exc))
    run = subprocess.run(
        [sys.executable, str(CONFIRM), "--model", str(gguf)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    lines = run.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("REPRODUCES") for line in lines), run.stdout
    assert_entries_reproduce("mistralrs", run.stdout)

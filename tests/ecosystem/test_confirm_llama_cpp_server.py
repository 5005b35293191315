"""The llama-cpp-python server's divergences of impl/ecosystem/llama_cpp_server/confirm.py
still reproduce against the literal llama.cpp values in the script — among them its two
log-prob defects: candidates named by text (colliding names overwrite each other) and,
with ``echo``, ``token_logprobs`` one position off OpenAI's definition. The script starts
the server itself on the 0.5B model (serve.py on a free port)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.supply import models as model_cache
from tests.ecosystem.engines import assert_entries_reproduce, engine_unavailable

pytestmark = pytest.mark.live  # a real server with the 0.5B model's weights (~1-3 min)
CONFIRM = Path(__file__).resolve().parents[2] / "impl" / "ecosystem" / "llama_cpp_server" / "confirm.py"


def test_llama_cpp_server_divergences_reproduce():
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        engine_unavailable("llama-cpp-python's server is not installed (pip install 'specgate[server]')")
    try:
        gguf = model_cache.model_ref("qwen2.5-coder-0.5b-instruct").gguf
    except model_cache.ModelError as exc:
        engine_unavailable(str(exc))
    run = subprocess.run(
        [sys.executable, str(CONFIRM), "--model", str(gguf)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, f"confirm.py exited {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"
    lines = run.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("REPRODUCED") for line in lines), run.stdout
    assert any('one "" candidate' in line for line in lines) and any(
        "token_logprobs[2]" in line for line in lines
    )
    assert_entries_reproduce("llama_cpp_server", run.stdout)

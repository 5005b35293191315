"""The llama-cpp-python server's divergences of impl/ecosystem/llama_cpp_server/confirm.py
still reproduce against the literal llama.cpp values in the script — among them its two
log-prob defects: candidates named by text (colliding names overwrite each other) and,
with ``echo``, ``token_logprobs`` one position off OpenAI's definition. The script starts
the server itself on the 0.5B model (serve.py on a free port)."""

import importlib.util

import pytest

from tests.ecosystem.engines import assert_entries_reproduce, confirm_on_the_real_model, engine_unavailable

pytestmark = pytest.mark.live  # a real server with the 0.5B model's weights (~1-3 min)


def test_llama_cpp_server_divergences_reproduce():
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        engine_unavailable("llama-cpp-python's server is not installed (pip install 'specgate[server]')")
    lines = confirm_on_the_real_model("llama_cpp_server")
    assert len(lines) == 5 and all(line.startswith("REPRODUCED") for line in lines), lines
    assert any('one "" candidate' in line for line in lines) and any(
        "token_logprobs[2]" in line for line in lines
    )
    assert_entries_reproduce("llama_cpp_server", "\n".join(lines))

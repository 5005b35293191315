"""Start llama-cpp-python's OpenAI-style server (``python -m llama_cpp.server``) with
llama.cpp's "extra buffer types" switched off: the ecosystem engine ``llama_cpp_server``
(its ``engine.toml`` ``server`` line) and the http adapter's tests
(``tests/engines/test_http.py``) both start it. Standalone: stdlib + llama-cpp-python.

Extra buffer types repack quantized weights for special CPU kernels (AMX tiles,
AVX-512 repacks). On CPUs that advertise AMX while the kernel does not grant the
process the tile state (some virtual machines), the AMX kernels die with SIGILL on
the first batched matmul. Plain buffers use llama.cpp's ordinary kernels
everywhere; the tests compare the server with llama.cpp in-process set up the
same way (``plain_buffers``).

    python impl/ecosystem/llama_cpp_server/serve.py --model M.gguf --host 127.0.0.1 --port P [server options]
"""

from __future__ import annotations

import contextlib
import runpy
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def plain_buffers() -> Iterator[None]:
    """``llama_cpp.Llama`` objects created inside load without extra buffer types."""
    import llama_cpp.llama_cpp as lib  # the module Llama takes its default params from

    default = lib.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        p = default()
        p.use_extra_bufts = False
        return p

    lib.llama_model_default_params = params
    try:
        yield
    finally:
        lib.llama_model_default_params = default


if __name__ == "__main__":
    sys.argv[0] = "llama_cpp.server"
    with plain_buffers():  # the server loads its model inside
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)

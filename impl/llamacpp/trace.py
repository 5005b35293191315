"""llama.cpp's own intermediates through its graph evaluation callback (``cb_eval``).

llama-cpp-python 0.3.36 exposes ``cb_eval`` / ``cb_eval_user_data`` in
``llama_context_params`` (the ``ggml_backend_sched_eval_callback`` C type), but
``Llama`` builds its context from ``llama_context_default_params()`` with no way to
pass them, so the tracing context is opened with that function wrapped to set the
callback (the same way ``engine._open`` sets the model parameters).

The scheduler asks the callback about every graph node (``ask`` true: answer whether
to observe it), then hands over each observed node once computed (``ask`` false). A
node's name is llama.cpp's graph tensor name — ``Qcur-3`` is given to the query
after the matmul, after the bias, and after RoPE, so the *last* node of a name in a
micro-batch is the point (``oracle.trace``). Its data is copied out with
``ggml_backend_tensor_get`` (any backend) and viewed through the tensor's byte
strides ``nb``; ``ne``/``nb`` come from ``struct ggml_tensor`` (ggml.h of the
bundled ggml, laid out below). A prompt split into several micro-batches gives
one value per batch: they are concatenated along the positions.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oracle.trace import KINDS, split_point

GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
#: Graph names that differ from the point's: this llama.cpp names the embedding
#: lookup's output ``embd`` (``inp_embd`` in older releases and llama-eval-callback's docs).
GRAPH_NAMES = {"inp_embd": "embd"}


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` of ggml.h (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def _ggml() -> ctypes.CDLL:
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
    base.ggml_get_name.restype = ctypes.c_char_p
    base.ggml_get_name.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    base.ggml_backend_tensor_get.restype = None
    base.ggml_backend_tensor_get.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
    ]
    return base


POINT_OF = {graph: point for point, graph in GRAPH_NAMES.items()}


def point_name(name: str) -> str | None:
    """A graph tensor name that is a trace point, else None."""
    try:
        split_point(name)
    except ValueError:
        return None
    return name


class Tap:
    """The ``cb_eval`` callback of one tracing context and what it saw in the current eval."""

    def __init__(self) -> None:
        self.ggml = _ggml()
        self.wanted: frozenset[str] = frozenset()
        self.batches: list[dict[str, np.ndarray]] = []
        self.callback = _CALLBACK_TYPE()(self._on_node)  # kept alive as long as the context

    def _on_node(self, tensor: int, ask: bool, _user: int) -> bool:
        try:
            graph_name = self.ggml.ggml_get_name(tensor).decode("utf-8", "replace")
            name = POINT_OF.get(graph_name, graph_name)
            if ask:
                return name in self.wanted
            if name in self.wanted:
                if name == "inp_embd" or not self.batches:  # a micro-batch starts at its embeddings
                    self.batches.append({})
                self.batches[-1][name] = self._read(tensor, name)
        except Exception as exc:  # never unwind through C; the eval's result is refused afterwards
            self.batches.append({"__error__": np.array([0.0])})
            self.error = f"{type(exc).__name__}: {exc}"
        return True

    def _read(self, tensor: int, name: str) -> np.ndarray:
        t = GgmlTensor.from_address(tensor)
        dtype = {GGML_TYPE_F32: np.float32, GGML_TYPE_F16: np.float16}.get(t.type)
        if dtype is None:
            raise ValueError(f"{t.name.decode()}: ggml type {t.type} is not f32/f16")
        size = self.ggml.ggml_nbytes(tensor)
        raw = np.empty(size, dtype=np.uint8)
        self.ggml.ggml_backend_tensor_get(tensor, raw.ctypes.data, 0, size)
        ne, nb = list(t.ne), list(t.nb)
        view = np.lib.stride_tricks.as_strided(raw.view(dtype), shape=ne[::-1], strides=nb[::-1])
        # ggml [ne0, ne1, ne2, ne3] (ne0 fastest) -> numpy [ne3, ne2, ne1, ne0]; tokens are the
        # outermost used axis: [T, heads * head_dim] or [T, columns]
        out = np.array(view, dtype=np.float32)
        kind, _ = split_point(name)
        n_tokens = (
            ne[2] if kind in ("Qcur", "Kcur", "Vcur") else ne[1]
        )  # [head_dim, heads, T] vs [columns, T]
        return out.reshape(n_tokens, -1)

    def run(self, llm: Any, ids: Sequence[int], points: Sequence[str]) -> dict[str, np.ndarray]:
        self.wanted, self.batches, self.error = frozenset(points), [], None
        try:
            llm.reset()
            llm.eval([int(i) for i in ids])
        finally:
            self.wanted = frozenset()
        if self.error:
            raise RuntimeError(f"reading llama.cpp's intermediates: {self.error}")
        out = {}
        for point in points:
            parts = [b[point] for b in self.batches if point in b]
            if not parts:
                raise ValueError(f"llama.cpp's graph has no tensor named {point!r}")
            out[point] = np.concatenate(parts, axis=0)
        return out


def _CALLBACK_TYPE() -> Any:
    import llama_cpp

    return llama_cpp.llama_cpp.ggml_backend_sched_eval_callback


def open_tracing(model_path: Path, n_ctx: int, n_threads: int, tap: Tap) -> Any:
    """A full-weights ``Llama`` whose context calls ``tap`` for every graph node."""
    import llama_cpp

    lib = llama_cpp.llama_cpp
    default_model, default_context = lib.llama_model_default_params, lib.llama_context_default_params

    def model_params() -> Any:
        params = default_model()
        params.use_extra_bufts = False  # see engine._open: no AMX repacking
        return params

    def context_params() -> Any:
        params = default_context()
        params.cb_eval = tap.callback
        params.cb_eval_user_data = None
        return params

    lib.llama_model_default_params, lib.llama_context_default_params = model_params, context_params
    try:
        return llama_cpp.Llama(model_path=str(model_path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                               n_threads=n_threads, logits_all=True, verbose=False)  # fmt: skip
    finally:
        lib.llama_model_default_params, lib.llama_context_default_params = default_model, default_context


def trace(llm: Any, tap: Tap, ids: Sequence[int], points: Sequence[str],
          positions: Sequence[int] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """The asked points of llama.cpp's forward over ``ids`` from position 0."""
    if len(ids) > llm.n_ctx():
        raise ValueError(f"{len(ids)} tokens exceed the tracing context of {llm.n_ctx()}")
    bad = [p for p in points if point_name(p) is None]
    if bad:
        raise ValueError(f"unknown trace points {bad}; kinds: {', '.join(KINDS)}")
    got = tap.run(llm, ids, points)
    rows = slice(None) if positions is None else list(positions)
    return {p: v[rows] for p, v in got.items()}

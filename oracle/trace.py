"""Named intermediates of the forward pass: the points a trace can ask for.

The names are llama.cpp's graph tensor names, so an engine derived from llama.cpp
has them already (its ``cb_eval`` callback sees them):

    inp_embd                    the token embeddings                       [T, n_embd]
    attn_norm-L                 rms_norm(x) * attn_norm                    [T, n_embd]
    Qcur-L, Kcur-L              queries / keys after the QK-norm (qwen3)   [T, heads * head_dim]
                                and RoPE
    Vcur-L                      values (after the bias on qwen2)           [T, n_head_kv * head_dim]
    kqv_out-L                   attention output, heads concatenated,      [T, n_head * head_dim]
                                before the output projection
    ffn_inp-L                   the residual stream after attention        [T, n_embd]
    ffn_norm-L                  rms_norm(ffn_inp) * ffn_norm               [T, n_embd]
    ffn_out-L                   the SwiGLU block's output (after down)     [T, n_embd]
    l_out-L                     the residual stream after the layer        [T, n_embd]
    result_norm                 rms_norm(x) * output_norm                  [T, n_embd]
    result_output               the logits                                 [T, n_vocab]

Heads are concatenated head-major (head h is columns ``h*head_dim .. (h+1)*head_dim``),
the layout of llama.cpp's [head_dim, heads, T] tensors read as [T, heads * head_dim].

A ``Recorder`` keeps copies of the points it was asked for, nothing else; the
forward calls it at each point and computes exactly what it computes without one.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: Per layer, in the order the forward computes them.
LAYER_POINTS: tuple[str, ...] = (
    "attn_norm",
    "Qcur",
    "Kcur",
    "Vcur",
    "kqv_out",
    "ffn_inp",
    "ffn_norm",
    "ffn_out",
    "l_out",
)
FIRST_POINTS: tuple[str, ...] = ("inp_embd",)
LAST_POINTS: tuple[str, ...] = ("result_norm", "result_output")
#: Every point kind (a per-layer kind without its ``-L``).
KINDS: tuple[str, ...] = FIRST_POINTS + LAYER_POINTS + LAST_POINTS
#: The kinds whose columns are heads of ``head_dim``.
HEADED: frozenset[str] = frozenset({"Qcur", "Kcur", "Vcur", "kqv_out"})


def split_point(name: str) -> tuple[str, int | None]:
    """``"Kcur-3"`` -> (``"Kcur"``, 3); ``"inp_embd"`` -> (``"inp_embd"``, None).
    A name that is no point raises ``ValueError`` naming it."""
    kind, dash, layer = name.rpartition("-")
    if dash and kind in LAYER_POINTS and layer.isdigit():
        return kind, int(layer)
    if name in FIRST_POINTS or name in LAST_POINTS:
        return name, None
    raise ValueError(
        f"unknown trace point {name!r}; points: {', '.join(KINDS)} (per layer as <kind>-<layer>)"
    )


def all_points(n_layer: int) -> list[str]:
    """Every point of an ``n_layer`` model, in the order the forward computes them."""
    per_layer = [f"{kind}-{layer}" for layer in range(n_layer) for kind in LAYER_POINTS]
    return [*FIRST_POINTS, *per_layer, *LAST_POINTS]


class Recorder:
    """Keeps a float32 copy of each asked-for point ([T, columns]) as the forward passes it."""

    def __init__(self, points: Iterable[str] = ()) -> None:
        self.wanted = frozenset(points)
        self.values: dict[str, np.ndarray] = {}

    def __call__(self, name: str, value: np.ndarray) -> None:
        if name in self.wanted:
            self.values[name] = np.array(value, dtype=np.float32, order="C")

    def heads(self, name: str, value: np.ndarray) -> None:
        """A point held as [heads, T, head_dim]: recorded as [T, heads * head_dim]."""
        if name in self.wanted:
            n_heads, t, d = value.shape
            self(name, value.transpose(1, 0, 2).reshape(t, n_heads * d))


NO_TRACE = Recorder()  # records nothing

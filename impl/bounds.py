"""How much of what an engine says we accept: one table of named bounds, applied
before an answer is stored, compared, diffed, validated or printed.

An engine decides how much it answers; the suite decides how much it holds. Every
bound is sized by what the request can legitimately need — the model's vocabulary,
the prompt's length, the reference's own output bound — so a conforming answer is
never refused, and anything larger is an ``EngineError`` (outcome ``error``) in one
line naming the field and the size, never a *fail* and never a traceback. The
``cmd`` client (``impl.process.client``) bounds each answer *line* by the op's
``answer_line_bytes`` before reading past it; both it and the ``http`` adapter check
the decoded answer with ``check_*`` below; the suite's checks (``specgate``) use the
same table for the text it compares and prints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from impl.protocol import EngineError
from oracle.template_bounds import DEFAULT_LIMITS


@dataclass(frozen=True)
class Bounds:
    # Room for the JSON envelope and an error object's message in any answer line:
    # far above any message worth reading, small next to the 2 GB a run may grow.
    line_slack_bytes: int = 1 << 20
    # A handshake is a few hundred bytes (engine, version, ≤ 8 capabilities).
    handshake_bytes: int = 1 << 20
    # A metadata answer: ~30 scalars (PROTOCOL.md section 4).
    metadata_bytes: int = 1 << 20
    # The reference renders at most this many characters (the oracle's sandbox
    # output bound, ``oracle.template_bounds.Limits.max_chars``) and refuses longer
    # output, so no longer prompt can match it.
    render_chars: int = DEFAULT_LIMITS.max_chars
    # One character in JSON is at most 6 bytes (``\\u001b``): text fields of a line.
    json_bytes_per_char: int = 6
    # Bytes of one token's piece in a decode/generate answer. Qwen's longest piece is
    # far shorter (pieces are BPE merges of at most a few dozen bytes; special tokens
    # are ``<|...|>`` names); 1 KiB is a generous ceiling.
    piece_bytes: int = 1024
    # Bytes of one id or probability written as JSON text (int32: 11 with its comma;
    # a shortest-round-trip double: ≤ 24), with room for whitespace.
    json_number_bytes: int = 32
    # No model a user gates has a larger vocabulary (Qwen: 151,936; the largest
    # published vocabularies are ~262,144): the fallback when the GGUF cannot be read.
    max_n_vocab: int = 1 << 20
    # The most ids a ``conversation_turn`` answer names (the whole prompt the cache holds):
    # a context far past any model the state stages play (Qwen's 32k to 128k).
    max_conversation_ids: int = 1 << 18
    # A render answer longer than this multiple of the reference's prompt (plus
    # ``render_slack_chars``) is not a divergence to diff but an oversize answer.
    render_factor: int = 4
    render_slack_chars: int = 64 * 1024
    # An engine's message (error, refusal) as kept and shown; stderr is kept by the
    # ``cmd`` client as its last 20 lines of 500 characters.
    message_chars: int = 2000
    # A case's record message (first divergence, error), as stored in reports.
    record_chars: int = 8000
    # A text diff: lines of context around the first divergence, each line cut to
    # this many characters around the divergence.
    diff_context_lines: int = 3
    diff_line_chars: int = 240
    # JSON values (numbers, strings, lists, objects) an answer may hold beyond what its
    # request needs (``answer_items``): an envelope, an error object, a handshake's
    # lists. Parsed, a value costs 30-250 bytes (an empty list 56, a dict 64+), so an
    # answer of ``[],[],…`` costs up to ~60 times its bytes: the count is checked on the
    # text before it is parsed.
    json_items_slack: int = 4096
    # An http: answer's values when the endpoint sets no bound of its own (/completion
    # with 64 log-probs a position for 512 positions: ~300,000): ≤ ~500 MB parsed.
    http_items: int = 1 << 21


BOUNDS = Bounds()


def cut(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters with a visible marker saying how
    many were left out (head and tail kept: the tail often holds the cause)."""
    if len(text) <= limit:
        return text
    head, tail = (limit * 3) // 4, limit // 4
    return f"{text[:head]}… [{len(text) - head - tail:,} characters cut] …{text[len(text) - tail :]}"


def oversize(field: str, size: int, unit: str, bound: int, why: str) -> EngineError:
    return EngineError(f"answer field {field} is {size:,} {unit}, over the bound of {bound:,} ({why})")


@lru_cache(maxsize=8)
def _n_vocab(gguf: str) -> int | None:
    from oracle.gguf import open_gguf

    try:
        tokens = open_gguf(gguf, header_only=True).metadata.get("tokenizer.ggml.tokens")
    except (OSError, ValueError):
        return None
    return len(tokens) if tokens is not None else None


def model_n_vocab(gguf: Path | str | None) -> int | None:
    """The vocabulary size the model's GGUF declares (None when it cannot be read)."""
    return _n_vocab(str(gguf)) if gguf else None


@lru_cache(maxsize=8)
def _trace_widths(gguf: str) -> dict[str, int] | None:
    """Per trace point kind, its columns (PROTOCOL.md section 4.6), from the hparams."""
    from oracle.gguf import open_gguf

    try:
        meta = open_gguf(gguf, header_only=True).metadata
        arch = meta["general.architecture"]
        n_embd, n_head = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.attention.head_count"])
        n_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
        head_dim = int(meta.get(f"{arch}.attention.key_length", n_embd // n_head))
        tokens = meta.get("tokenizer.ggml.tokens")
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    widths = {"Qcur": n_head * head_dim, "kqv_out": n_head * head_dim, "Kcur": n_kv * head_dim,
              "Vcur": n_kv * head_dim}  # fmt: skip
    if tokens is not None:
        widths["result_output"] = len(tokens)
    return {**dict.fromkeys(("inp_embd", "attn_norm", "ffn_inp", "ffn_norm", "ffn_out", "l_out",
                             "result_norm"), n_embd), **widths}  # fmt: skip


def trace_width(point: str, gguf: Path | str | None) -> int | None:
    """The columns of trace ``point`` (``Qcur-3``, ``result_norm``) for the model's GGUF
    (None when it cannot be read or the point is not one of PROTOCOL.md's)."""
    widths = _trace_widths(str(gguf)) if gguf else None
    kind = point.rsplit("-", 1)[0] if point[-1:].isdigit() else point
    return widths.get(kind) if widths else None


def check_trace_point(point: str, value: Any, rows: int, width: int | None) -> None:
    """One trace point's answer is ``[rows, width]``, or one ``EngineError`` naming the
    field (``points.<point>``) and its shape. (Non-finite values are for the trace walk
    to find: where they first appear is the finding, ``specgate.checks.trace``.)"""
    field = f"points.{point}"
    shape = list(getattr(value, "shape", ()))
    if len(shape) != 2 or shape[0] != rows:
        raise EngineError(f"answer field {field} has shape {shape}; expected [{rows}, columns] "
                          f"(one row per position)")  # fmt: skip
    if width is not None and shape[1] != width:
        raise EngineError(
            f"answer field {field} has width {shape[1]:,}; the model's {point} is {width:,} wide"
        )


# --- answer lines (cmd:), bounded per request before they are read -------------------
def answer_line_bytes(op: str, fields: dict[str, Any], n_vocab: int | None) -> int:
    """The longest answer line ``op`` with these request fields can legitimately need."""
    b = BOUNDS
    vocab = n_vocab or b.max_n_vocab
    slack = b.line_slack_bytes
    if op == "metadata":
        return b.metadata_bytes
    if op in ("render", "render_template"):
        return b.render_chars * b.json_bytes_per_char + slack
    if op in ("encode", "split"):
        # A token covers at least one byte of the text: at most one id (or piece) per byte.
        size = len(str(fields.get("text", "")).encode("utf-8", "surrogatepass"))
        return size * (b.json_number_bytes + b.json_bytes_per_char) + slack
    if op == "decode":
        return len(fields.get("ids", ())) * b.piece_bytes * 2 + slack
    if op == "logits":
        rows = max(len(fields.get("ids", ())), 1)
        # The full float32 array (base64: 4/3 of 4 bytes a logit) is the larger form.
        return rows * vocab * 6 + slack
    if op == "session_append":  # one row of logits, and n_past
        return vocab * 6 + slack
    if op == "batch_logits":  # one row per prompt
        return max(len(fields.get("prompts", ())), 1) * vocab * 6 + slack
    if op == "conversation_turn":  # one row of logits, and the ids the cache holds (at most the context)
        return vocab * 6 + b.max_conversation_ids * b.json_number_bytes + slack
    if op == "trace":
        # Each point asked, its rows as wide as the model says (unreadable: the vocabulary,
        # result_output's width, the widest), as float32 in base64 (6 bytes a value at most).
        rows = len(fields.get("positions") or ()) or max(len(fields.get("ids", ())), 1)
        gguf = (fields.get("model") or {}).get("gguf")
        widths = [trace_width(str(p), gguf) or vocab for p in fields.get("points", ())]
        return rows * max(sum(widths), 1) * 6 + slack
    if op == "sample":
        width = logits_width(fields.get("logits"))
        steps = len(fields.get("params", {}).get("chain", ())) or 5
        return (steps + 3) * (width or vocab) * 2 * b.json_number_bytes + slack
    if op in ("generate", "session_generate"):
        params = fields.get("params", {})
        tokens = int(params.get("max_tokens", 128)) + 1
        top = int(params.get("top_candidates", 3))
        per_token = b.piece_bytes * 2 * 3 + (top + 2) * 2 * b.json_number_bytes
        return tokens * per_token + slack
    return slack


def answer_items(op: str, fields: dict[str, Any], n_vocab: int | None) -> int:
    """The most JSON values an answer to ``op`` with these request fields can need
    (arrays travel as ``$array`` strings, so a logits or trace answer holds a few)."""
    b = BOUNDS
    slack = b.json_items_slack
    if op in ("encode", "split"):
        return len(str(fields.get("text", "")).encode("utf-8", "surrogatepass")) + slack
    if op == "decode":
        return 4 * len(fields.get("ids", ())) + slack
    if op == "logits":
        return 8 * max(len(fields.get("ids", ())), 1) + slack
    if op == "session_append":
        return 16 + slack
    if op == "batch_logits":
        return 8 * max(len(fields.get("prompts", ())), 1) + slack
    if op == "conversation_turn":
        return b.max_conversation_ids + 16 + slack
    if op == "trace":
        return 8 * len(fields.get("points", ())) + slack
    if op == "sample":
        steps = len(fields.get("params", {}).get("chain", ())) or 5
        return (steps + 3) * (logits_width(fields.get("logits")) or n_vocab or b.max_n_vocab) * 2 + slack
    if op in ("generate", "session_generate"):
        params = fields.get("params", {})
        tokens = int(params.get("max_tokens", 128)) + 1
        return tokens * ((int(params.get("top_candidates", 3)) + 2) * 4 + 16) + slack
    if op == "metadata":
        return 16 * slack
    return slack  # render, render_template: one string


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_items(text: str) -> int:
    """An upper bound on the values a JSON text holds, without parsing it: its commas and
    openers (outside strings), plus one."""
    count = text.count(",") + text.count("[") + text.count("{") + 1
    if count > BOUNDS.json_items_slack:  # commas and brackets inside strings do not count
        bare = _JSON_STRING.sub('""', text)
        count = bare.count(",") + bare.count("[") + bare.count("{") + 1
    return count


def check_json_items(text: str, bound: int, why: str) -> None:
    """``EngineError`` when the JSON ``text`` holds more than ``bound`` values (before it
    is parsed: what parsing it would cost is the point)."""
    count = json_items(text)
    if count > bound:
        raise EngineError(f"answer holds {count:,} JSON values or more, over the bound of {bound:,} ({why})")


def value_items(value: Any, bound: int) -> int:
    """The JSON values a wire-form ``value`` holds (every scalar and container one), counted
    only up to ``bound + 1``: what an answer costs to check and send, known before either."""
    count, stack = 0, [value]
    while stack and count <= bound:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if count + len(item) > bound:  # a flat list over the bound is known by its length
                return bound + 1
            stack.extend(item)
    return count


def logits_width(logits: Any) -> int | None:
    """The vocabulary width of a ``sample`` request's wire-encoded logits."""
    if isinstance(logits, dict) and isinstance(logits.get("$array"), dict):
        shape = logits["$array"].get("shape") or [0]
        return int(shape[-1])
    return None


# --- decoded answers, checked against the model before use ---------------------------
def check_ids(ids: Sequence[Any], n_vocab: int | None, field: str) -> None:
    """Every id an integer inside the vocabulary, ``0 <= id < n_vocab``."""
    vocab = n_vocab or BOUNDS.max_n_vocab
    for k, token in enumerate(ids):
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < vocab:
            raise EngineError(
                f"answer field {field}[{k}] = {cut(repr(token), 40)} is not a token id of this model "
                f"(0 <= id < n_vocab {vocab:,})"
            )


def check_count(count: int, bound: int, field: str, why: str) -> None:
    if count > bound:
        raise oversize(field, count, "items", bound, why)


def check_text(
    text: Any, field: str, bound: int = BOUNDS.render_chars, why: str = "the reference's own output bound"
) -> None:
    if isinstance(text, str) and len(text) > bound:
        raise oversize(field, len(text), "characters", bound, why)


def check_logit_rows(
    rows: Any, n_rows: int, n_vocab: int | None, field: str = "logits", per: str = "one per id"
) -> np.ndarray:
    """A ``[n_rows, n_vocab]`` float32 array of finite logits, or one ``EngineError``
    naming the field (wrong rank, row count — ``per`` says what a row is —, width, or a
    NaN/±Infinity)."""
    try:
        arr = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EngineError(f"answer field {field} is not a numeric array: {cut(str(exc), 200)}") from None
    if arr.ndim != 2:
        raise EngineError(f"answer field {field} has shape {arr.shape}; expected [{n_rows}, n_vocab]")
    if arr.shape[0] != n_rows:
        raise EngineError(f"answer field {field} has {arr.shape[0]} rows; expected {n_rows} ({per})")
    if n_vocab is not None and arr.shape[1] != n_vocab:
        raise EngineError(
            f"answer field {field} has width {arr.shape[1]:,}; the model's n_vocab is {n_vocab:,}"
        )
    if arr.shape[1] == 0:
        raise EngineError(f"answer field {field} has width 0")
    bad = ~np.isfinite(arr)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise EngineError(
            f"answer field {field}[{row}][{col}] is {arr[row, col]!r}: logits must be finite "
            f"({int(bad.sum()):,} non-finite values)"
        )
    return arr


def check_top_k(answer: Any, n_rows: int, n_vocab: int | None) -> None:
    """A ``top_k`` logits answer's declared ``n_vocab`` against the model's, before
    anything of that size is allocated."""
    declared = answer.get("n_vocab") if isinstance(answer, dict) else None
    if isinstance(declared, bool) or not isinstance(declared, int):
        raise EngineError(f"answer field top_k.n_vocab is {cut(repr(declared), 40)}; expected an integer")
    expected = n_vocab if n_vocab is not None else None
    if expected is not None and declared != expected:
        raise EngineError(f"answer field top_k.n_vocab is {declared:,}; the model's n_vocab is {expected:,}")
    if not 0 < declared <= BOUNDS.max_n_vocab:
        raise oversize("top_k.n_vocab", declared, "ids", BOUNDS.max_n_vocab, "no vocabulary is larger")


def finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise EngineError(f"answer field {field} is {value!r}; expected a finite number")
    return value

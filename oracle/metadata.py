"""Typed, range-checked reads of GGUF metadata values.

``oracle.gguf`` guarantees the *bytes*: every value has one of GGUF's types. Whether
a value has the type and range its key needs is a second question, and well-formed
bytes can hold nonsense: a ``block_count`` of -5, an rms epsilon of NaN, an eos id
stored as a float, a ``token_type`` array longer than the vocabulary, a chat
template stored as an integer. Left unchecked, such values surface later as a
``TypeError`` deep in the tokenizer, or not at all (a NaN epsilon runs and prints
garbage).

So every metadata key the oracle reads goes through one accessor here. Each returns
a value of the promised Python type within its bounds, or raises a ``GGUFError``
naming the file, the key and the (abbreviated) bad value. Types are strict, as
llama.cpp's are: an integer key refuses a float or a bool, a float key refuses an
integer, a string key refuses everything but a string.

An absent key returns ``default``: whether absence is an error is the caller's
decision (dispatch refuses a missing hyper-parameter as an ``UnsupportedModel``,
the tokenizer a missing vocabulary as a ``TokenizerError``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from oracle.gguf import GGUFError, GGUFFile

Source = GGUFFile | Mapping[str, Any]
T = TypeVar("T")

UINT32_MAX = 2**32 - 1
ABBREVIATE_AT = 60  # characters of a bad value quoted in an error


def where(source: Source) -> str:
    """How errors name the source: the file's path, or 'GGUF metadata' for a plain mapping."""
    return str(source.path) if isinstance(source, GGUFFile) else "GGUF metadata"


def metadata_error(source: Source, key: str, problem: str) -> GGUFError:
    """The one error shape for a bad value: ``<file>: metadata 'key' <problem>``."""
    return GGUFError(f"{where(source)}: metadata {key!r} {problem}")


def abbreviate(value: Any) -> str:
    """A bad value as a short quote: long strings and arrays are cut."""
    if isinstance(value, np.ndarray | list | tuple):
        head = ", ".join(repr(v.item() if isinstance(v, np.generic) else v) for v in list(value[:3]))
        text = f"[{head}{', ...' if len(value) > 3 else ''}] ({len(value)} entries)"
    else:
        text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= ABBREVIATE_AT else text[: ABBREVIATE_AT - 3] + "..."


def _type_name(source: Source, key: str, value: Any) -> str:
    """The GGUF type name when the file is at hand, else the Python one."""
    if isinstance(source, GGUFFile) and key in source.types:
        return source.types[key]
    if isinstance(value, np.ndarray):
        return f"array[{value.dtype}]"
    return type(value).__name__


def _entries(source: Source) -> Mapping[str, Any]:
    return source.metadata if isinstance(source, GGUFFile) else source


def _wrong_type(source: Source, key: str, value: Any, expected: str) -> GGUFError:
    return metadata_error(
        source, key, f"has type {_type_name(source, key, value)} ({abbreviate(value)}); expected {expected}"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_float(value: Any) -> bool:
    return isinstance(value, float | np.floating)


# --- scalars ------------------------------------------------------------------------


def read_int(source: Source, key: str, lo: int, hi: int, default: T = None) -> int | T:
    """An integer key in ``lo..hi`` (inclusive)."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    if not _is_int(value):
        raise _wrong_type(source, key, value, "an integer")
    if not lo <= int(value) <= hi:
        raise metadata_error(source, key, f"is {abbreviate(value)}; expected {lo}..{hi}")
    return int(value)


def read_float(
    source: Source, key: str, positive: bool = False, hi: float = math.inf, default: T = None
) -> float | T:
    """A finite float key; ``positive`` refuses zero and below, ``hi`` bounds it above."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    if not _is_float(value):
        raise _wrong_type(source, key, value, "a float")
    number = float(value)
    if not math.isfinite(number):
        raise metadata_error(source, key, f"is {number}; expected a finite number")
    if (positive and number <= 0) or number > hi:
        bounds = f"{'> 0' if positive else 'a number'}{f' and <= {hi}' if hi < math.inf else ''}"
        raise metadata_error(source, key, f"is {number!r}; expected {bounds}")
    return number


def read_str(source: Source, key: str, nonempty: bool = False, default: T = None) -> str | T:
    """A string key; ``nonempty`` refuses ''."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    if not isinstance(value, str):
        raise _wrong_type(source, key, value, "a string")
    if nonempty and not value:
        raise metadata_error(source, key, "is an empty string")
    return value


def read_bool(source: Source, key: str, default: T = None) -> bool | T:
    """A bool key (GGUF's bool type; 0/1 integers are refused, as llama.cpp does)."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    if not isinstance(value, bool | np.bool_):
        raise _wrong_type(source, key, value, "a bool")
    return bool(value)


# --- arrays -------------------------------------------------------------------------


def _check_length(source: Source, key: str, value: Any, length: int | None, min_length: int) -> None:
    if length is not None and len(value) != length:
        raise metadata_error(source, key, f"has {len(value)} entries; expected {length}, one per token")
    if len(value) < min_length:
        raise metadata_error(source, key, f"has {len(value)} entries; expected at least {min_length}")


def read_strings(
    source: Source, key: str, length: int | None = None, min_length: int = 0, default: T = None
) -> list[str] | T:
    """An array of strings, optionally of exactly ``length`` / at least ``min_length`` entries."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    if not isinstance(value, list | tuple):
        raise _wrong_type(source, key, value, "an array of strings")
    bad = (
        None
        if _read_as_strings(source, key)
        else next((i for i, v in enumerate(value) if not isinstance(v, str)), None)
    )
    if bad is not None:
        raise metadata_error(
            source, key, f"entry {bad} is {abbreviate(value[bad])}; expected an array of strings"
        )
    _check_length(source, key, value, length, min_length)
    return value if isinstance(value, list) else list(value)  # no copy of a 150k vocabulary


def _read_as_strings(source: Source, key: str) -> bool:
    """Whether the reader decoded ``key`` as a GGUF string array: then every entry is a
    ``str`` already, and 150k vocabulary entries need not be checked one by one."""
    return isinstance(source, GGUFFile) and source.types.get(key) == "array[string]"


def read_ints(
    source: Source, key: str, lo: int, hi: int, length: int | None = None, default: T = None
) -> np.ndarray | T:
    """An array of integers in ``lo..hi``, as int64, optionally of exactly ``length`` entries."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    array = _numeric_array(value)
    if array is None or not (array.dtype.kind in "iu" or array.size == 0):
        raise _wrong_type(source, key, value, "an array of integers")
    _check_length(source, key, array, length, 0)
    if array.size and (int(array.min()) < lo or int(array.max()) > hi):
        bad = int(np.flatnonzero((array < lo) | (array > hi))[0])
        raise metadata_error(
            source, key, f"entry {bad} is {abbreviate(array[bad])}; expected values in {lo}..{hi}"
        )
    return array.astype(np.int64)


def read_floats(source: Source, key: str, length: int | None = None, default: T = None) -> np.ndarray | T:
    """An array of finite floats, optionally of exactly ``length`` entries."""
    entries = _entries(source)
    if key not in entries:
        return default
    value = entries[key]
    array = _numeric_array(value)
    if array is None or not (array.dtype.kind == "f" or array.size == 0):
        raise _wrong_type(source, key, value, "an array of floats")
    _check_length(source, key, array, length, 0)
    finite = np.isfinite(array)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise metadata_error(source, key, f"entry {bad} is {abbreviate(array[bad])}; expected finite floats")
    return array


def _numeric_array(value: Any) -> np.ndarray | None:
    """``value`` as a 1-D numeric numpy array (the reader's arrays already are), else None."""
    if isinstance(value, np.ndarray):
        return value if value.ndim == 1 else None
    if isinstance(value, list | tuple) and all(_is_int(v) or _is_float(v) for v in value):
        return np.asarray(value) if value else np.zeros(0, np.int64)
    return None


# --- token ids ------------------------------------------------------------------------


def read_token_id(source: Source, key: str, n_tokens: int, default: T = None) -> int | T:
    """A special-token id: an integer naming an entry of the vocabulary (0..n_tokens-1)."""
    entries = _entries(source)
    if key in entries and _is_int(entries[key]) and not 0 <= int(entries[key]) < n_tokens:
        raise metadata_error(source, key, f"is {entries[key]}, outside the vocabulary of {n_tokens} tokens")
    return read_int(source, key, 0, n_tokens - 1, default)

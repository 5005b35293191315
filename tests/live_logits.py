"""Live reference logits shared by two test modules: ``tests/oracle/test_forward.py``
(full-vocabulary comparison) and ``tests/references/test_logits.py`` (which runs after
it) need the same transformers outputs for 16 (model, prompt) pairs, computed once."""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

_kept_logits: dict[tuple[str, str, tuple[int, ...]], Path] = {}
_file_numbers = itertools.count()  # never reused: a forgotten entry's number is not freed


@cache
def _logits_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="specgate-reference-logits-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def reference_logits(reference: Any, model: Any, ids: list[int], keep: bool = False) -> Any:
    """A live reference's full logits for ``(model, ids)``, computed once per session.

    ``tests/oracle/test_forward.py`` (full-vocabulary comparison, ``keep=True``) and
    ``tests/references/test_logits.py`` (which runs after it) need the same
    transformers outputs for 16 (model, prompt) pairs only as data. Kept ones are on
    disk, not in memory (a 512-token prompt of the 0.5B is 311 MB), and read back
    memory-mapped."""
    key = (reference.name, str(model.gguf), tuple(ids))
    if key in _kept_logits:
        return np.load(_kept_logits[key], mmap_mode="r")
    logits = np.asarray(reference.logits(model, ids))
    if keep:
        path = _logits_dir() / f"{next(_file_numbers)}.npy"
        np.save(path, logits)
        _kept_logits[key] = path
    return logits


def forget_logits(model: Any) -> None:
    """Delete the logits kept for ``model`` (every reference's): the last module that
    reads them is done with them (the tiny models' alone would fill gigabytes of disk)."""
    for key in [k for k in _kept_logits if k[1] == str(model.gguf)]:
        _kept_logits.pop(key).unlink(missing_ok=True)

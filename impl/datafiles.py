"""Where specgate's data lives: ``corpus/``, ``snapshots/`` and ``protocol/`` (the schemas).

In a checkout (and its editable install) they are the repository's top-level folders; an
installed wheel carries them as package data under ``specgate/_data/`` (``setup.py`` copies
them there when it builds the wheel). This is the one place that tells the two apart:
every module reading the corpus, the snapshots or the schemas goes through ``DATA_ROOT``.
(In ``impl/``, the lowest layer that needs it: the adapters read the corpus and the
schemas too, and never import ``specgate``.)
"""

from __future__ import annotations

from pathlib import Path

#: The folders the wheel carries (``setup.py`` reads this tuple).
DATA_FOLDERS = ("corpus", "snapshots", "protocol")

_ABOVE = Path(__file__).resolve().parents[1]  # a checkout's root, or site-packages


def data_root(above: Path = _ABOVE) -> Path:
    """The folder holding ``corpus/``, ``snapshots/`` and ``protocol/``: the checkout's root
    when ``above`` is one (its ``pyproject.toml`` beside the folders), else the installed
    package's ``specgate/_data``."""
    if (above / "pyproject.toml").is_file() and all((above / d).is_dir() for d in DATA_FOLDERS):
        return above
    return above / "specgate" / "_data"


DATA_ROOT = data_root()

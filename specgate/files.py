"""Writing report files whatever an engine answered.

An engine's answer is whatever its JSON said, and JSON can carry lone UTF-16 surrogates
(``"\\udcff"``): a JavaScript engine slicing an emoji in half answers one. Such a string
cannot be encoded as UTF-8, so every report file is written with the surrogate spelled
as its escape (``\\udcff``): in Markdown and HTML it shows what the engine said, and in
JSON written with ``ensure_ascii=False`` the escape is JSON's own, so the file reads
back to the very same string.
"""

from __future__ import annotations

from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` as UTF-8, lone surrogates written as ``\\uXXXX``."""
    path.write_bytes(text.encode("utf-8", "backslashreplace"))

"""``specgate report summary FILE.md ...``: the Markdown reports with their pictures inside,
for a CI page that shows Markdown but cannot follow a relative link (GitHub's
``$GITHUB_STEP_SUMMARY``): each ``![alt](name.png)`` whose file lies beside the report
becomes a ``data:image/png;base64`` URI. A picture above ``MAX_IMAGE_BYTES`` stays a link
(a step summary holds at most 1 MiB), and so does one whose file is missing or not a
regular file. The report itself is read only as a regular file of at most
``MAX_MARKDOWN_BYTES`` (``files.read_regular``: a FIFO or ``/dev/zero`` is one line,
``files.UnsafeFile``), and its control characters are shown as escapes."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from specgate.safe_io import files
from specgate.safe_io.text_safety import controls

MAX_IMAGE_BYTES = 512 * 1024  # half of GitHub's 1 MiB step-summary limit: room for the text
MAX_MARKDOWN_BYTES = 64 << 20  # a parity report's Markdown (its messages are cut: a few MB at most)
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")


def embedded(md_path: Path) -> str:
    """The report at ``md_path`` with its PNG links replaced by data: URIs."""

    def inline(match: re.Match[str]) -> str:
        picture = md_path.parent / match.group(2)
        if "://" in match.group(2):
            return match.group(0)
        try:
            data = base64.b64encode(files.read_regular(picture, MAX_IMAGE_BYTES, "picture")).decode("ascii")
        except files.UnsafeFile:
            return match.group(0)
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    raw = files.read_regular(md_path, MAX_MARKDOWN_BYTES, "Markdown report")
    text = controls(raw.decode("utf-8", "backslashreplace"))
    return IMAGE.sub(inline, text)

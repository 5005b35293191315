"""``specgate report summary FILE.md ...``: the Markdown reports with their pictures inside,
for a CI page that shows Markdown but cannot follow a relative link (GitHub's
``$GITHUB_STEP_SUMMARY``): each ``![alt](name.png)`` whose file lies beside the report
becomes a ``data:image/png;base64`` URI. A picture above ``MAX_IMAGE_BYTES`` stays a link
(a step summary holds at most 1 MiB), and so does one whose file is missing."""

from __future__ import annotations

import base64
import re
from pathlib import Path

MAX_IMAGE_BYTES = 512 * 1024  # half of GitHub's 1 MiB step-summary limit: room for the text
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")


def embedded(md_path: Path) -> str:
    """The report at ``md_path`` with its PNG links replaced by data: URIs."""

    def inline(match: re.Match[str]) -> str:
        picture = md_path.parent / match.group(2)
        if "://" in match.group(2) or not picture.is_file() or picture.stat().st_size > MAX_IMAGE_BYTES:
            return match.group(0)
        data = base64.b64encode(picture.read_bytes()).decode("ascii")
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    return IMAGE.sub(inline, md_path.read_text(encoding="utf-8"))

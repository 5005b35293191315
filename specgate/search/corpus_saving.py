"""``--save-to corpus``: a search reproducer becomes a regular corpus case, so a found
bug becomes a permanent gate once its references are recorded.

* split / encode → a line of ``corpus/texts/tokenizer.jsonl`` (category ``search``);
* render on a model → ``corpus/conversations/<n>_search_<group>.json``;
* render of a construct template → ``corpus/templates/constructs/<n>_search_<group>.json``.

Decode id lists and sampler windows have no corpus file of their own (decode cases
are derived from the texts; sampler windows are TOML written by hand): saving
them is refused with that reason. The case's references are then recorded like
every other case's, by the snapshots session — the command is printed; until
then the stale construct snapshot or the missing case says so loudly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specgate.safe_io import files
from specgate.upkeep import corpus as corpus_files


class SaveError(Exception):
    """A reproducer that cannot become a corpus case (one line)."""


def save(data: dict[str, Any], corpus: Path = corpus_files.CORPUS) -> tuple[Path, str]:
    """Write the reproducer ``data`` into the corpus; the file written and the command
    that records its references."""
    # the group id becomes part of a file name: letters, digits, - and _ only
    stage, inp, group = data["stage"], data["input"], files.safe_component(str(data.get("group", "search")))
    note = f"found by specgate search ({data.get('impl', '?')}): {data['signature']}"
    if stage in ("split", "encode"):
        path = corpus / "texts" / "tokenizer.jsonl"
        lines = path.read_text(encoding="utf-8")
        existing = [json.loads(line) for line in lines.split("\n") if line.strip()]
        if any(case["text"] == inp["text"] for case in existing):
            raise SaveError(f"the text {inp['text']!r} is already a tokenizer corpus case")
        case = {"id": f"search-{group}", "category": "search", "text": inp["text"]}
        path.write_text(
            lines.rstrip("\n") + "\n" + json.dumps(case, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return path, "nox -s snapshots -- tests/references/test_tokenizer.py"
    if stage == "render" and "template" in inp:
        folder = corpus / "templates" / "constructs"
        body = {"construct": note, "template": inp["template"], "context": inp["context"]}
        return _numbered(folder, group, body), "nox -s snapshots -- tests/references/test_render.py"
    if stage == "render":
        body = {
            "description": note,
            "messages": inp["messages"],
            "kwargs": inp.get("kwargs", {}),
            "add_generation_prompt": [bool(inp["add_generation_prompt"])],
        }
        return _numbered(
            corpus / "conversations", group, body
        ), "nox -s snapshots -- tests/references/test_render.py"
    raise SaveError(
        f"a {stage} reproducer has no corpus file of its own (decode cases come from the texts, "
        "sampler windows are hand-written TOML in corpus/sampler/windows.toml, generate stop cases are "
        "derived from the prompts of corpus/stops/generate.toml): add it by hand"
    )


def _numbered(folder: Path, group: str, body: dict[str, Any]) -> Path:
    numbers = [
        int(p.name.split("_", 1)[0]) for p in folder.glob("*.json") if p.name.split("_", 1)[0].isdigit()
    ]
    path = folder / f"{max(numbers, default=0) + 1:02d}_search_{group.replace('-', '_')}.json"
    path.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path

"""PROTOCOL.md's tables — the op table and the keys of the object results, which
``python -m impl.process.schema --write PROTOCOL.md`` generates from ``protocol/*.schema.json``
between their ``<!-- schema:NAME -->`` markers — kept as syrupy snapshots, one Markdown
file per table (``tests/engines/__snapshots__/test_protocol_tables/``): a schema change that
reshapes what an engine author reads shows as a diff to review (``pytest
--snapshot-update`` accepts it; ``tests/engines/test_protocol_schemas.py`` keeps the
document equal to what the schemas generate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from impl.process import schema
from tests.text_snapshots import MarkdownFile

ROOT = Path(__file__).resolve().parents[2]
TABLES = ["ops", "sample", "generate"]


def test_every_marked_table_is_snapshotted() -> None:
    sections = schema.marked_sections((ROOT / "PROTOCOL.md").read_text(encoding="utf-8"))
    assert sorted(sections) == sorted(TABLES) == sorted(schema.generated_tables())


@pytest.mark.parametrize("name", TABLES)
def test_protocol_md_table(name: str, snapshot) -> None:
    sections = schema.marked_sections((ROOT / "PROTOCOL.md").read_text(encoding="utf-8"))
    assert sections[name] + "\n" == snapshot(extension_class=MarkdownFile)

"""syrupy extensions for the suite's own outputs kept as readable Markdown and JSON files, one per test, in
the test's ``__snapshots__/<test module>/`` folder (``pytest --snapshot-update`` rewrites
them). The reference snapshots under ``snapshots/`` are not these: they are specgate's own
format, recorded from the references with ``--record-references``."""

from __future__ import annotations

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode


class MarkdownFile(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "md"


class JsonFile(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "json"

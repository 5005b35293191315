"""The one loader of a gate record's case: the snapshot case it was gated on, read from
the snapshot root the record carries (a ``--snapshot-dir`` run's own directory, else the
package's ``snapshots/``), never from the default root by the model's id alone. Triage
(the inputs it re-checks and shrinks into reproducers), the diagnosis and the HTML case
browser all read cases through it.

A snapshot file is read once per loader (``files.read_regular``: bounded, a regular file
only, ``snapshots.read``'s checks); one that cannot be read, or a case it does not hold,
is None — the record's own carried input (``GateRecord.input``) and message remain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgate.upkeep import snapshots


def root_of(record: Any) -> Path:
    """The snapshot root a record's case was read from."""
    root = getattr(record, "snapshot_root", "") or ""
    return Path(root) if isinstance(root, str) and root else snapshots.SNAPSHOT_ROOT


class RecordedCases:
    """Snapshot cases by record, each snapshot file read at most once."""

    def __init__(self) -> None:
        self.files: dict[tuple[Path, str, str], dict[str, Any]] = {}

    def case(self, record: Any, snapshot: str) -> dict[str, Any] | None:
        """The case ``record`` was gated on, from ``snapshot`` (a snapshot name: ``split``,
        ``render_template`` …) under the record's snapshot root; None if it has none."""
        case_id, model = getattr(record, "case", ""), getattr(record, "model", "")
        if not case_id or not isinstance(case_id, str) or not isinstance(model, str):
            return None
        key = (root_of(record), model, snapshot)
        if key not in self.files:
            try:
                self.files[key] = snapshots.read(model, snapshot, key[0])["cases"]
            except (snapshots.SnapshotError, ValueError, OSError, AttributeError, TypeError):
                self.files[key] = {}
        found = self.files[key].get(case_id)
        return found if isinstance(found, dict) else None


def recorded_case(record: Any, snapshot: str) -> dict[str, Any] | None:
    """``RecordedCases().case``: one record's case (a loader of its own)."""
    return RecordedCases().case(record, snapshot)

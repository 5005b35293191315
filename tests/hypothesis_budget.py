"""Per-property example counts: each property's count sits beside it with the evidence
for it (what planted defects it finds, and after how many examples; what an earlier
issue's acceptance requires). CI's profile (``conftest.py``) runs every other property
at its default of 1000; the ``dev`` profile caps every count at its own (100)."""

from __future__ import annotations

from hypothesis import settings


def examples(ci: int) -> settings:
    """``ci`` examples under CI's profile; never more than the loaded profile's count."""
    return settings(max_examples=min(ci, settings.default.max_examples))

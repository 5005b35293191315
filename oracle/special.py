"""The special-token scan: protocol markers become single ids before BPE runs.

``<|im_end|>`` or ``<｜User｜>`` fed to the pre-tokenizer would be cut into
ordinary pieces (the full-width bars of R1's markers never recombine), so the
text is first cut at special-token occurrences. Two rules decide which
occurrence is taken:

* earliest position wins — the leftmost marker is the next structural event;
* at one position the longest string wins (``<think▁begin｜>`` beats ``<think>``).

Candidates are bucketed by first character, each bucket sorted longest-first,
so the scan only looks where some marker could start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class SpecialScanner:
    def __init__(self, specials: Mapping[str, int]) -> None:
        self.ids = dict(specials)
        self.by_first: dict[str, list[str]] = {}
        for text in sorted(self.ids, key=len, reverse=True):
            self.by_first.setdefault(text[0], []).append(text)

    def find(self, text: str, start: int) -> tuple[int, str] | None:
        """The earliest (position, special) at or after ``start``, longest at a tie."""
        best: tuple[int, str] | None = None
        for first, candidates in self.by_first.items():
            pos = text.find(first, start)
            while pos != -1 and (best is None or pos < best[0]):
                hit = next((c for c in candidates if text.startswith(c, pos)), None)
                if hit is not None:
                    best = (pos, hit)
                    break
                pos = text.find(first, pos + 1)
        return best

    def segments(self, text: str) -> Iterator[tuple[str, int | None]]:
        """``text`` cut into (plain text, None) and (special, its id) segments, in order."""
        start = 0
        while (found := self.find(text, start)) is not None:
            pos, special = found
            if pos > start:
                yield text[start:pos], None
            yield special, self.ids[special]
            start = pos + len(special)
        if start < len(text):
            yield text[start:], None

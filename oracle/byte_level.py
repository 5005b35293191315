"""The byte-level alphabet: the 256 byte values <-> 256 printable code points.

Byte-level BPE works on bytes, not characters, so any input — CJK, emoji, binary
junk — has a representation. But vocabularies and merge lists are stored as
text, and a raw space or control byte inside a stored string would be ambiguous
(merges are written as ``"left right"``, split on the space). So every byte is
given a printable stand-in: printable ASCII and most of Latin-1 stand for
themselves, and the remaining 68 bytes (controls, space, DEL, NBSP, soft hyphen)
take code points from U+0100 upward in byte order — space becomes ``Ġ``
(U+0120), newline ``Ċ`` (U+010A).

Encoding maps each byte of a piece's UTF-8 to its stand-in before merging;
decoding maps stand-ins back to bytes. Characters outside the table (vocabulary
entries holding real Unicode, such as ``<｜User｜>``) decode as their own UTF-8.
"""

from __future__ import annotations


def _byte_to_char() -> dict[int, str]:
    """The GPT-2 table: bytes that are printable keep their own code point; the
    rest are numbered 256, 257, … in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR: dict[int, str] = _byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in BYTE_TO_CHAR.items()}

# ``bytes.decode("latin-1")`` turns each byte into the code point of the same value;
# this ``str.translate`` table then swaps in the stand-in: one C-level pass per piece.
_LATIN1_TO_STANDIN = {b: c for b, c in BYTE_TO_CHAR.items()}


def to_standin(data: bytes) -> str:
    """Bytes -> their stand-in characters (one character per byte)."""
    return data.decode("latin-1").translate(_LATIN1_TO_STANDIN)


def from_standin(text: str) -> bytes:
    """Stand-in text -> bytes. A character that is not a stand-in (real Unicode in
    a vocabulary entry) contributes its own UTF-8 bytes."""
    out = bytearray()
    for ch in text:
        byte = CHAR_TO_BYTE.get(ch)
        if byte is None:
            out += ch.encode("utf-8")
        else:
            out.append(byte)
    return bytes(out)

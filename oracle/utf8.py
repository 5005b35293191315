"""The UTF-8 holdback: how much of a byte buffer can be shown without splitting a character.

Tokens are byte sequences, and a multi-byte character (e.g. 中 = E4 B8 AD) may be
split across two tokens. A streaming decoder that converted each token's bytes to
text on its own would stamp a U+FFFD into the output for good. Instead it keeps
the full byte stream and emits only its longest prefix of complete characters;
the tail waits for the next token.

Only the length grammar of UTF-8 is walked (the lead byte's top bits give the
sequence length); the bytes are not validated. A stray continuation or invalid
byte counts as a one-byte sequence, so the holdback can never stall on garbage.
"""

from __future__ import annotations


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 as a whole (a token piece may not be)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def sequence_length(lead: int) -> int:
    """Length in bytes of the UTF-8 sequence that starts with byte ``lead``."""
    if lead & 0xF8 == 0xF0:
        return 4
    if lead & 0xF0 == 0xE0:
        return 3
    if lead & 0xE0 == 0xC0:
        return 2
    return 1


def complete_utf8_prefix_len(buf: bytes) -> int:
    """Offset where the prefix of whole UTF-8 sequences in ``buf`` ends.

    Everything from the returned offset onward is an incomplete trailing
    character that must wait for more bytes.
    """
    i = 0
    while i < len(buf):
        n = sequence_length(buf[i])
        if i + n > len(buf):
            break
        i += n
    return i

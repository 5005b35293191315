"""The report escapes (``specgate.safe_io.text_safety.escaped`` and ``json_escaped``) look
only at code points outside printable ASCII; their definitions look at every code point
(``escaped_plain``, ``json_escaped_plain``). Held equal on any text, and to hand-written
escapes of the invisible ones (not the code's own)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from specgate.safe_io.text_safety import escaped, escaped_plain, json_escaped, json_escaped_plain

# any code point, lone surrogates included (an engine's text may carry them), ASCII and
# the look-alikes the escapes are for over-represented
TEXT = st.text(
    st.one_of(
        st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF),
        st.sampled_from(
            "a \t\n\\\x00\x1b\x7f\x85\xa0\u0301\u200b\u202e\u2028\ufeff\ud800\U000e0001\U0010fffd"
        ),
    ),
    max_size=60,
)


@given(TEXT, st.booleans())
def test_escaped_is_its_definition(text: str, double: bool) -> None:
    assert escaped(text, double) == escaped_plain(text, double)


@given(st.lists(TEXT, max_size=4), st.sampled_from([None, 1]))
def test_json_escaped_is_its_definition_and_loads_back(texts: list[str], indent: int | None) -> None:
    out = json_escaped(texts, indent)
    assert out == json_escaped_plain(texts, indent)
    assert json.loads(out) == texts


def test_the_invisible_are_escaped_and_the_rest_kept() -> None:
    assert escaped("e\u0301 a\u00a0b\x85\\\t\n\U000e0001z") == "e\\u0301 a\\xa0b\\x85\\\\\t\n\\U000e0001z"
    assert escaped("q\\x", double_backslashes=False) == "q\\x"
    assert json_escaped(["é\u200b\U000e0001"]) == '["é\\u200b\\udb40\\udc01"]'

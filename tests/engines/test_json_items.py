"""The parsed-size pre-scan (``impl.bounds.json_items``) counts the values a JSON answer
holds without parsing it — and only the commas and openers *outside* strings: a rendered
prompt full of commas, brackets and escaped quotes is one string, one value, and passes;
the same characters as JSON structure are refused (issue 38).

The end-to-end case runs the ``cmd`` adapter against a real engine process
(``fault_engine.py toy``, no fault), whose render echoes the message's text.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from impl import bounds
from impl.protocol import EngineError, ModelRef
from impl.registry import resolve

FAULT_ENGINE = Path(__file__).resolve().parent / "fault_engine.py"
MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)
# Far past what a render answer may hold as values (``answer_items``: the slack alone).
MANY = 4 * bounds.BOUNDS.json_items_slack
RENDER_BOUND = bounds.answer_items("render", {}, None)
# Text whose every character is JSON structure outside a string: commas, openers, and
# escaped quotes that must not end the string early.
PUNCTUATION = ',[{\\",' * MANY


def answer_line(prompt_json: str) -> str:
    return '{"id": 1, "result": {"prompt": ' + prompt_json + "}}"


def test_commas_and_brackets_inside_a_string_are_one_value() -> None:
    escaped = '"' + PUNCTUATION.replace("\\", "\\\\").replace('"', '\\"') + '"'
    line = answer_line(escaped)
    assert line.count(",") > RENDER_BOUND  # the bare count would refuse it
    assert bounds.json_items(line) <= 5  # id, result, prompt: a handful of values
    bounds.check_json_items(line, RENDER_BOUND, "what this request can need")  # no EngineError


def test_an_escaped_quote_does_not_end_the_string() -> None:
    """``\\"`` inside a string is text: the commas after it are still inside."""
    line = answer_line('"a\\", ' + "," * MANY + ' b"')
    assert bounds.json_items(line) <= 5


def test_the_same_punctuation_as_structure_is_refused() -> None:
    line = answer_line("[" + ",".join(["[]"] * MANY) + "]")
    assert bounds.json_items(line) > MANY
    with pytest.raises(EngineError, match=r"answer holds [\d,]+ JSON values or more"):
        bounds.check_json_items(line, RENDER_BOUND, "what this request can need")


def test_a_render_full_of_commas_passes_the_cmd_adapter() -> None:
    """A real engine's render answer holding ``MANY`` commas and brackets in its prompt
    is read and returned whole, not refused on its count of JSON values."""
    engine = resolve("cmd:" + shlex.join([sys.executable, str(FAULT_ENGINE), "toy"]))
    try:
        text = engine.render(MODEL, [{"role": "user", "content": PUNCTUATION}], add_generation_prompt=False)
    finally:
        engine.close()
    assert PUNCTUATION in text

"""Engine text made inert wherever a report shows it.

What an engine says (messages, refusals, rendered prompts in diffs, its stderr) is
data, never markup or terminal control: in Markdown it goes into code that it
cannot close (a fence longer than any run of backticks in it; inline code delimited
the same way, newlines shown as ``↵``), plain text in Markdown has its markup
characters escaped, and control characters (ANSI escapes, C1 controls, bidirectional
overrides) are shown as escapes (``\\x1b``) in the terminal and in every report.
Sizes are bounded too (``impl.bounds``): a record's message is cut with a visible
marker before it is stored.

One function per format, and every place that writes engine text (handshake fields,
messages, answers, case ids, stage and model names read from a merged report, stderr)
goes through it: ``md_text`` / ``md_inline`` / ``md_fence`` (Markdown), ``html_text``
(HTML), ``xml_text`` (JUnit XML), ``png_text`` (the PNG's drawn text and text
chunks), ``terminal`` (the terminal), ``files.safe_component`` (file names).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from typing import Any

from impl.bounds import BOUNDS, cut

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional
# formatting characters that reorder what a reader sees (Trojan Source).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~&])")


def _escape_code(code: int) -> str:
    """A code point as Python writes it in a string literal's escape: ``\\x85``, ``\\u202e``, ``\\U000e0001``."""
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _escape(match: re.Match[str]) -> str:
    return _escape_code(ord(match.group()))


def controls(text: str) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\u202e``);
    tab and newline kept."""
    return _CONTROLS.sub(_escape, text)


def one_line(text: str) -> str:
    """Controls escaped and line breaks shown as ``↵``: a single line whatever ``text`` holds."""
    return controls(text).replace("\r", "␍").replace("\n", "↵")


def bounded(text: str, limit: int = BOUNDS.record_chars) -> str:
    """A record's message as stored: cut to ``limit`` characters with a marker."""
    return cut(text, limit)


def md_text(text: str) -> str:
    """Plain Markdown text: one line, every markup character backslash-escaped (so
    ``<details>``, ``<!--``, ``![...](...)``, ``#``, ``|`` in a table stay literal)."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


def _longest_run(text: str, char: str = "`") -> int:
    runs = re.findall(re.escape(char) + "+", text)
    return max((len(r) for r in runs), default=0)


def md_inline(text: str) -> str:
    """Inline code that the text cannot close: delimited by more backticks than its
    longest run, padded with a space when it starts or ends with a backtick, one line."""
    body = one_line(text).replace("|", "\\|")  # a table cell ends at an unescaped pipe
    ticks = "`" * (_longest_run(body) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


def md_fence(text: str, info: str = "") -> list[str]:
    """A fenced code block holding ``text`` literally: the fence is longer than any
    run of backticks in it (so no line of the text closes it), controls escaped."""
    body = controls(text)
    fence = "`" * max(3, _longest_run(body) + 1)
    return [fence + info, body, fence]


def terminal(text: str) -> str:
    """A line for the terminal: control characters (ANSI escapes) as escapes."""
    return controls(text)


def html_text(text: str) -> str:
    """Text for HTML (an element's content or a quoted attribute): controls as escapes,
    then ``& < > " '`` as entities."""
    return html.escape(controls(str(text)))


def xml_text(text: str) -> str:
    """Text for an XML element or attribute (JUnit XML) before the serializer quotes it:
    controls as escapes (XML 1.0 cannot hold most C0 controls even as references)."""
    return controls(str(text))


def png_text(text: str) -> str:
    """Text drawn into the PNG: one line, controls escaped, and every code point outside
    printable ASCII written as an escape (``\\u4e2d``) — the PNG's font (Pillow's own)
    draws ASCII only, anything else as the same empty box."""
    return _NOT_PLAIN.sub(lambda m: _escape_code(ord(m[0])), one_line(str(text)))


def record_message(report: Any, message: str) -> str:
    """A gate case's message as recorded (bounded), after bounding and neutralizing
    what pytest itself prints for the case (the short summary, the failure section,
    junit): an engine's text reaches no terminal raw and no report in full. pytest's
    own text is left untouched when already small and clean."""
    message = bounded(message)
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:  # a skip: (path, line, reason)
        path, line, reason = report.longrepr
        report.longrepr = (path, line, controls(bounded(str(reason))))
        return message
    text = report.longreprtext if report.longrepr is not None else ""
    if len(text) > BOUNDS.record_chars or controls(text) != text:
        report.longrepr = controls(message or bounded(text))
    return message


def _invisible(ch: str) -> bool:
    """A code point a reader cannot see or tell apart: controls, combining marks,
    format characters, unassigned/private ones, and every space but the plain one."""
    cat = unicodedata.category(ch)
    return cat[0] in "MC" or (cat[0] == "Z" and ch != " ")


#: The code points ``escaped`` and ``json_escaped`` look at: every one but tab, newline and
#: printable ASCII (none of which is invisible), so a report of mostly ASCII text is scanned
#: by the regex engine, not one Python call per character.
_NOT_PLAIN = re.compile(r"[^\t\n\x20-\x7e]")


def _json_escape_code(code: int) -> str:
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escaped(text: str, double_backslashes: bool = True) -> str:
    """``text`` with every invisible or combining code point written as an escape
    (``e\\u0301`` for a decomposed é, ``\\x85`` for NEL, ``\\xa0`` for a no-break
    space); tab and newline kept (the displays show them), a backslash doubled so an
    escape in the text is told from one made here (``double_backslashes=False`` for a
    message, whose quoted texts already carry Python's escapes). The definition, one code
    point at a time, is ``escaped_plain``."""
    text = text.replace("\\", "\\\\") if double_backslashes else text
    return _NOT_PLAIN.sub(lambda m: _escape_code(ord(m[0])) if _invisible(m[0]) else m[0], text)


def escaped_plain(text: str, double_backslashes: bool = True) -> str:
    """``escaped`` by its definition: every code point looked at (tests hold the two equal)."""
    out = []
    for ch in text.replace("\\", "\\\\") if double_backslashes else text:
        out.append(ch if ch in "\t\n" or not _invisible(ch) else _escape_code(ord(ch)))
    return "".join(out)


def json_escaped(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON (non-ASCII text kept readable) with every invisible or
    combining code point written as a JSON ``\\uXXXX`` escape: still valid JSON that
    loads to the same value, but ``"e\\u0301"`` is not shown as ``"é"``. The definition,
    one code point at a time, is ``json_escaped_plain``."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _NOT_PLAIN.sub(lambda m: _json_escape_code(ord(m[0])) if _invisible(m[0]) else m[0], text)


def json_escaped_plain(value: Any, indent: int | None = None) -> str:
    """``json_escaped`` by its definition: every code point looked at (tests hold the two equal)."""
    out = []
    for ch in json.dumps(value, ensure_ascii=False, indent=indent):
        out.append(ch if ch in "\t\n" or not _invisible(ch) else _json_escape_code(ord(ch)))
    return "".join(out)

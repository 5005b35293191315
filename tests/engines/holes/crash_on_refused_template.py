"""Hole: the oracle, except that it crashes (the process exits) on every template
it would refuse.

A crash is not a refusal: on the conversations and constructs that transformers
refuses, the render gate must report ``error`` — never the expected refusal — and
the run must fail.

    python tests/engines/holes/crash_on_refused_template.py
"""

from __future__ import annotations

import os
import sys

from impl.oracle import OracleEngine
from impl.process.server import serve
from impl.protocol import Unsupported


class CrashOnRefusal(OracleEngine):
    name = "crash-on-refused-template"

    def render(self, *args, **kwargs):
        try:
            return super().render(*args, **kwargs)
        except Unsupported:
            os._exit(70)

    def render_template(self, *args, **kwargs):
        try:
            return super().render_template(*args, **kwargs)
        except Unsupported:
            os._exit(70)


if __name__ == "__main__":
    sys.exit(serve(CrashOnRefusal()))

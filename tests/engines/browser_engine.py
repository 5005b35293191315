"""A planted engine for the case browser's test: the oracle with two defects an
engine author might have — the pre-tokenizer without the ``\\s+(?!\\S)`` arm (split and
encode fail on whitespace runs before a word) and decode refused for long inputs
(refusals, grouped by their message in the report).

    python tests/engines/browser_engine.py   (serves PROTOCOL.md on stdio)
"""

from __future__ import annotations

import sys

from impl.oracle import OracleEngine
from impl.process.server import serve
from impl.protocol import Unsupported
from oracle import pretokenize

LONG = 40  # token ids: longer decode inputs are refused


class Engine(OracleEngine):
    def decode(self, model, ids):
        if len(ids) > LONG:
            raise Unsupported(f"decode of more than {LONG} ids is not implemented yet")
        return super().decode(model, ids)


if __name__ == "__main__":
    pretokenize.ARMS = tuple(arm for arm in pretokenize.ARMS if arm is not pretokenize.trailing_space)
    sys.exit(serve(Engine()))

"""Hole: an engine with quantized-class numerics that claims the ``exact`` class.

The oracle's logits with a deterministic perturbation of up to ±0.05 per logit —
the size of llama.cpp's activation rounding on the tiny models — served with the
handshake claiming both classes. The ``quantized`` rows must pass (KL and top-1
stay within llama.cpp's bounds); the ``exact`` rows must fail on max |Δlogit|.

    python tests/engines/holes/quantized_claims_exact.py [--claim quantized]

(``--claim quantized`` makes the same engine claim only the class it meets;
``SPECGATE_LOGITS_LOG=FILE`` appends a line per forward pass to FILE.)
"""

from __future__ import annotations

import os
import sys

import numpy as np

from impl.oracle import OracleEngine
from impl.process.server import serve

NOISE = 0.05


class QuantizedClaimingExact(OracleEngine):
    name = "quantized-claims-exact"
    classes = frozenset({"exact", "quantized"})

    def logits(self, model, ids):
        if log := os.environ.get("SPECGATE_LOGITS_LOG"):  # one line per forward, for the tests
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{model.id} {len(ids)}\n")
        exact = np.asarray(super().logits(model, ids), dtype=np.float32)
        rng = np.random.default_rng(len(ids))
        return exact + rng.uniform(-NOISE, NOISE, size=exact.shape).astype(np.float32)


if __name__ == "__main__":
    engine = QuantizedClaimingExact()
    if sys.argv[1:] == ["--claim", "quantized"]:
        engine.classes = frozenset({"quantized"})
    sys.exit(serve(engine))

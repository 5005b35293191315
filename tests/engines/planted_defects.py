"""The command line of the planted-defect engines (``fixable_*.py``): the oracle served
over the engine protocol with the defects named by ``--defects=a,b`` planted first
(each a function of the script's ``DEFECTS`` that patches the oracle in this process).

Imported by those scripts as ``planted_defects`` (their folder is on ``sys.path``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence

from impl.process.server import serve
from impl.registry import resolve


def serve_with_defects(defects: Mapping[str, Callable[[], object]], argv: Sequence[str] | None = None) -> int:
    """Plant the defects named on the command line, then serve the oracle until stdin ends."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--defects", default="", help=f"comma-separated, of {sorted(defects)}")
    for name in filter(None, parser.parse_args(argv).defects.split(",")):
        defects[name]()
    if os.environ.get("PLANTED_ENGINE_STARTS"):  # each start appends a line (tests count the processes)
        with open(os.environ["PLANTED_ENGINE_STARTS"], "a", encoding="utf-8") as starts:
            starts.write(f"{os.getpid()}\n")
    return serve(resolve("oracle"))

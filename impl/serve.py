"""``python -m impl.serve --impl X``: serve a Python adapter over PROTOCOL.md on
stdin/stdout (``impl.process.server``), as ``specgate engine`` does; ``impl.registry``
runs every Python adapter that is not built in this way, out of the judge's process.
With ``--check`` it only loads the adapter's class and says why it cannot be loaded.

(Here, beside ``registry``, not in ``impl.process``: it resolves the adapter by name,
and ``impl.process`` is below the registry.)
"""

from __future__ import annotations

import sys

from impl.process.server import claim_stdout, serve


def main(argv: list[str] | None = None) -> int:
    """``python -m impl.serve --impl X [--check]``: serve adapter ``X`` (what
    ``specgate engine`` and ``impl.registry.served`` run), or with ``--check`` only load
    its class and say why it cannot be loaded."""
    import argparse

    from impl.registry import MissingExtra, UnknownImpl, _load_class, resolve

    parser = argparse.ArgumentParser(prog="python -m impl.serve")
    parser.add_argument("--impl", required=True)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    out = None if args.check else claim_stdout()  # before the adapter loads
    try:
        if args.check:
            if ":" in args.impl:
                _load_class(args.impl)
            else:
                resolve(args.impl, in_process=True)
            return 0
        engine = resolve(args.impl, in_process=True)
    except UnknownImpl as exc:
        print(f"specgate engine: {exc}", file=sys.stderr)
        return 4 if isinstance(exc, MissingExtra) else 2
    return serve(engine, stdout=out)


if __name__ == "__main__":
    sys.exit(main())

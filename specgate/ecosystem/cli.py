"""The command line (``python -m specgate.ecosystem``, ``nox -s ecosystem``).

    python -m specgate.ecosystem install [--engines a,b] [--status FILE]
    python -m specgate.ecosystem run [--engines a,b] [--budget S] [--total-budget S] [--out DIR]
                                     [--publish ECOSYSTEM.md]
    python -m specgate.ecosystem remark SAVED.json --out DIR [--confirm]
    python -m specgate.ecosystem site SAVED.json --out DIR

``run`` writes ``DIR/ecosystem.{md,html,json}`` (``DIR/ecosystem-<a>+<b>.*`` for an
``--engines`` subset) and the static site ``DIR/ecosystem-site/`` (``index.html``, a page
per engine with its case browser: ``specgate.ecosystem.site``); ``--publish FILE`` copies the full table's Markdown to FILE and
leaves FILE alone after a subset. ``remark`` writes a saved table (its JSON and the reports it
names) anew under DIR, each root cause marked by the engine folders' confirm entries as they are
now (``--confirm``: the confirm scripts run again): ``specgate.ecosystem.remark``. ``site``
writes the saved table's site into DIR as it was saved (its marks, its engines' reports), no
engine run, nothing else written. Budgets: ``specgate.ecosystem.budgets``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from specgate.ecosystem.install import install_all
from specgate.ecosystem.spec import ECOSYSTEM_DIR, EcosystemError
from specgate.ecosystem.table import publish, run_all
from specgate.safe_io import files
from specgate.supply.models import PROJECT_ROOT


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specgate.ecosystem",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "run"):
        p = sub.add_parser(name)
        p.add_argument("--root", type=Path, default=ECOSYSTEM_DIR, help="the engine folders' parent")
        p.add_argument("--engines", default="", help="comma-separated engine folder names (default: all)")
        p.add_argument("--pip-args", default="", help="extra pip install arguments (e.g. '--find-links DIR')")
    sub.choices["install"].add_argument(
        "--status", type=Path, default=PROJECT_ROOT / "reports" / "ecosystem-install.json"
    )
    run = sub.choices["run"]
    run.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports")
    run.add_argument(
        "--budget",
        type=positive,
        default=None,
        help="seconds per engine (default: its measured cost, scaled by the machine's load)",
    )
    run.add_argument(
        "--total-budget", type=positive, default=None, help="seconds for all engines (default: no cap)"
    )
    run.add_argument("--shrink-budget", type=float, default=60.0, help="per engine (default 60)")
    run.add_argument("--shrink-group-budget", type=float, default=15.0)
    run.add_argument(
        "--publish",
        type=Path,
        default=None,
        help="copy the full table's Markdown here (ECOSYSTEM.md); never done for an --engines subset",
    )
    again = sub.add_parser("remark")
    again.add_argument("saved", type=Path, help="a saved table: reports/ecosystem.json")
    again.add_argument("--out", type=Path, required=True, help="where the re-marked table is written")
    again.add_argument("--root", type=Path, default=ECOSYSTEM_DIR, help="the engine folders' parent")
    again.add_argument("--confirm", action="store_true", help="run the confirm scripts again")
    built = sub.add_parser("site")
    built.add_argument("saved", type=Path, help="a saved table: reports/ecosystem.json")
    built.add_argument("--out", type=Path, required=True, help="the site's folder (its index.html)")
    args = parser.parse_args(argv)
    if args.command == "site":
        from specgate.ecosystem.remark import load
        from specgate.ecosystem.site import write_site

        table = load(args.saved, root=None)
        index = write_site(table, args.out)
        print(f"specgate ecosystem: {index} ({len(table.rows)} engine pages)")
        return 0
    if args.command == "remark":
        from specgate.ecosystem.remark import counts, remark

        table = remark(args.saved, args.out, args.root, rerun_confirm=args.confirm)
        marks = ", ".join(f"{n} {status}" for status, n in sorted(counts(table).items()))
        print(f"specgate ecosystem: {args.out / table.stem}.md re-marked: {marks}")
        return 0
    engines = [e.strip() for e in args.engines.split(",") if e.strip()] or None
    pip_args = shlex.split(args.pip_args)
    if args.command == "install":
        return install_all(args.root, engines, pip_args, args.status)
    table = run_all(
        args.root,
        args.out,
        engines=engines,
        budget=args.budget,
        total_budget=args.total_budget,
        pip_args=pip_args,
        extra=[
            "--shrink-budget",
            str(args.shrink_budget),
            "--shrink-group-budget",
            str(args.shrink_group_budget),
        ],
    )
    stem = args.out / table.stem
    print(f"specgate ecosystem: {stem}.md, {stem}.html, {stem}-site/index.html ({table.seconds:g} s)")
    if args.publish is not None:
        print(f"specgate ecosystem: {publish(table, args.out, args.publish)}")
    return 1 if table.problems else 0


def run() -> None:
    try:
        sys.exit(main())
    except (EcosystemError, files.WriteError) as exc:
        print(f"specgate ecosystem: {exc}", file=sys.stderr)
        sys.exit(4)

"""``specgate search``: the command line of the differential search."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")


def duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h`` → seconds (argparse type: a bad value is one line)."""
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 90s, 10m, 1h")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("search", help="differential search for an engine's divergences beyond the corpus")
    s.add_argument("--impl", help="the engine to search (any --impl form)")
    s.add_argument(
        "--stages",
        type=csv,
        help="comma-separated: split,encode,decode,render,template,sample,logits,generate",
    )
    s.add_argument("--models", type=csv, help="models for the model stages (default: each stage's own)")
    s.add_argument(
        "--budget",
        type=duration,
        default=600.0,
        help="wall time of the session, e.g. 90s, 10m (default 10m): 65%% searching, "
        "the rest minimizing and confirming the root causes",
    )
    s.add_argument(
        "--given",
        type=csv,
        default=[],
        help="known deviations taken as given, comma-separated tokenizer catalogue names (e.g. nfc, "
        "whitespace_run_whole: a parity report's diagnosis): the split/encode/decode search's "
        "reference is the oracle with them, so it finds the divergences they do not explain",
    )
    s.add_argument(
        "--given-cause",
        action="append",
        default=[],
        metavar="CAUSE",
        help="a localized cause taken as given (repeatable), as a parity report heads its group, e.g. "
        '"special-token scan: a control token\'s text is cut out as its own segment in plain mode": '
        "split/encode divergences localized to it are counted as explained, not kept",
    )
    s.add_argument(
        "--given-from",
        action="append",
        default=[],
        metavar="REPORT.json",
        help="a parity report's JSON: its diagnosed tokenizer deviations (as --given) and localized "
        "causes (as --given-cause) taken as given",
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", default="reports", help="report directory (default reports)")
    s.add_argument("--db", help="hypothesis example database (default <out>/search-db): resumes from it")
    s.add_argument(
        "--max-memory",
        type=float,
        default=6000.0,
        help="MB of resident memory the search may add to its process (default 6000)",
    )
    s.add_argument("--save-to", choices=["corpus"], help="turn reproducers into corpus cases")
    s.add_argument("--from", dest="from_file", help="with --save-to: the reproducer file to save")
    s.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.save_to and args.from_file:
        return _save([Path(args.from_file)])
    if not args.impl:
        print("specgate: search needs --impl (or --save-to corpus --from FILE)", file=sys.stderr)
        return 2
    from impl.protocol import EngineError
    from impl.registry import UnknownImpl, check, resolve
    from specgate.search import report
    from specgate.search.reference_confirm import ENGINE_DIVERGENCE, ORACLE_BUG
    from specgate.search.search_session import SearchError, run_search

    if args.given:  # a name the catalogue does not hold: one line, before any engine starts
        from specgate.search.given import UnknownGiven, knobs_of

        try:
            knobs_of(args.given)
        except UnknownGiven as exc:
            print(f"specgate: {exc}", file=sys.stderr)
            return 2
    from specgate.search.given import given_cause

    try:  # a cause that is none: a usage error, as an unknown --given name (one line, exit 2)
        stated = [given_cause(cause) for cause in args.given_cause]
    except ValueError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    try:  # a report that cannot be read or names no cause: a bad file (one line, exit 4)
        given, causes = _given(args, stated)
    except ValueError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    try:
        check(args.impl)
        engine = resolve(args.impl)
    except UnknownImpl as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        result = run_search(
            engine, args.impl, stages=args.stages, models=args.models, budget=args.budget, seed=args.seed,
            database=Path(args.db) if args.db else out / "search-db", max_rss_mb=args.max_memory,
            log=lambda line: print(line, flush=True), given=given, given_causes=causes,
        )  # fmt: skip
    except SearchError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:  # the engine could not even answer what it offers (its handshake)
        print(f"specgate: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    finally:
        engine.close()
    for path in report.write(result, out):
        print(f"report: {path}")
    for f in result.by_verdict(ORACLE_BUG):
        print(f"specgate: ORACLE BUG — {f.candidate.signature}\n  input: {f.input}", file=sys.stderr)
    failures = result.by_verdict(ENGINE_DIVERGENCE)
    print(
        f"search: {len(failures)} engine divergence(s), {len(result.by_verdict(ORACLE_BUG))} oracle bug(s), "
        f"{len(result.findings) - len(failures) - len(result.by_verdict(ORACLE_BUG))} unconfirmed or disputed"
    )
    if args.save_to:
        _save([Path(f.reproducer_path) for f in failures if f.reproducer_path])
    if result.given_causes:
        print(f"search: {report.explained_line(result)}")
    asked = sum(r.examples for r in result.runs)
    if not sum(r.answered for r in result.runs):  # nothing searched: never a clean bill
        print(
            f"search: FAILS — the engine answered none of the {asked} input(s) asked "
            "(each was refused, not applicable or an error): nothing was searched",
            file=sys.stderr,
        )
        return 1
    return 1 if failures or result.by_verdict(ORACLE_BUG) else 0


def _given(args: argparse.Namespace, stated: list[str]) -> tuple[list[str], list[str]]:
    """The catalogue names and localized causes taken as given: ``--given``, the
    ``--given-cause`` causes (``stated``, read once by the caller) and each ``--given-from``
    report's (its notes printed); a ``ValueError`` (one line) for a report that names none."""
    from specgate.search.given import from_report

    names, causes = list(args.given), list(stated)
    for path in args.given_from:
        more_names, more_causes, notes = from_report(Path(path))
        names += [n for n in more_names if n not in names]
        causes += more_causes
        for note in notes:
            print(f"--given-from {path}: {note}")
    if names or causes:
        print(f"given: {', '.join([*names, *causes])}")
    return names, list(dict.fromkeys(causes))


def _save(paths: list[Path]) -> int:
    from specgate.run import reproducer
    from specgate.search.corpus_saving import SaveError, save

    status = 0
    for path in paths:
        try:
            written, command = save(reproducer.load(path))
        except (reproducer.ReproError, SaveError) as exc:
            print(f"specgate: {exc}", file=sys.stderr)
            status = 4  # a file that is not a savable reproducer: a usage error
            continue
        print(f"saved {path} as a corpus case in {written}; record its references with: {command}")
    return status

"""``specgate`` command line: the models cache and serving an adapter over the process protocol.

specgate models fetch [ID ...]   download, assemble, verify and derive into the cache
specgate models tiny             generate the tiny Qwen2/Qwen3 models in every tensor type
specgate models list             what the manifest holds and what is cached
specgate models verify [ID ...]  re-hash cached models in full against their sha256
specgate models path ID          the cached GGUF's path
specgate models export ID DIR    tokenizer.json + tokenizer_config.json of a model's GGUF
specgate parity --impl NAME      gate an engine stage by stage (--help; pytest options too)
specgate engine --impl NAME      serve an adapter over PROTOCOL.md (JSON lines on stdio)
specgate repro FILE --impl NAME  replay a minimized reproducer (exit 1 while it still diverges)
specgate report merge FILES...   join shard JSON reports (--shard I/N runs) into one report [--out DIR]
specgate report diff OLD NEW     what changed between two runs' JSON reports (exit 1 if something newly fails)
specgate report summary MD...  print Markdown reports with their PNGs embedded (for $GITHUB_STEP_SUMMARY)
specgate search --impl NAME      differential search beyond the corpus [--stages --models --budget --seed]
"""

from __future__ import annotations

import argparse
import signal
import sys

from specgate.supply import models as model_cache


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _models(args: argparse.Namespace) -> int:
    manifest = model_cache.load_manifest()
    if args.action == "fetch":
        from specgate.supply.fetch import fetch

        previous = signal.signal(signal.SIGTERM, _interrupt)  # a killed fetch cleans up like Ctrl-C
        try:
            for model_id in args.ids or list(manifest):
                if model_id not in manifest:
                    raise model_cache.ModelError(
                        f"unknown model {model_id!r}; manifest ids: {', '.join(manifest)}"
                    )
                fetch(manifest[model_id])
        finally:
            signal.signal(signal.SIGTERM, previous)
        return 0
    if args.action == "tiny":
        from specgate.supply.tiny import generate_all

        generate_all()
        return 0
    if args.action == "list":
        from specgate.supply.fetch import cache_state

        corrupt = 0
        for model_id, entry in manifest.items():
            gguf = model_cache.model_dir(model_id) / entry.file
            state, problem = cache_state(entry)
            print(f"{model_id:<40} {entry.architecture:<8} {entry.role:<16} {state:<8} {gguf}", flush=True)
            if problem:
                print(f"specgate: {problem}", file=sys.stderr, flush=True)
                corrupt += 1
        return 1 if corrupt else 0
    if args.action == "verify":
        return _verify(manifest, args.ids)
    if args.action == "path":
        for model_id in args.ids:
            print(model_cache.model_ref(model_id, manifest).gguf)
        return 0
    if args.action == "export":
        return _export(args.ids, manifest)
    raise AssertionError(args.action)


def _verify(manifest: dict[str, model_cache.ModelEntry], ids: list[str]) -> int:
    """``models verify``: hash every file of each model in full (stamps ignored, then renewed);
    one row per model; exit status 1 if any is corrupt or, when named, missing."""
    from specgate.supply import tiny

    known = [*manifest, *tiny.model_ids()]
    for model_id in ids:
        if model_id not in known:
            raise model_cache.ModelError(
                f"unknown model {model_id!r}; manifest ids: {', '.join(manifest)}; or a tiny id (tiny-qwen2-f32, ...)"
            )
    present = {*model_cache.cached_models(manifest), *model_cache.cached_tiny_models()}
    failed = 0
    for model_id in ids or [m for m in known if m in present]:
        if model_id not in present:
            print(f"{model_id:<40} missing", flush=True)
            failed += 1
            continue
        try:
            if model_id in manifest:
                digest = model_cache.verify_entry(manifest[model_id], full=True)
            else:
                digest = model_cache.verify_tiny(model_id, full=True)
        except model_cache.CorruptModelError as exc:
            print(f"{model_id:<40} corrupt  {exc.path.name}", flush=True)
            print(f"specgate: {exc}", file=sys.stderr, flush=True)
            failed += 1
            continue
        print(f"{model_id:<40} ok       sha256 {digest}", flush=True)
    return 1 if failed else 0


def _export(ids: list[str], manifest: dict) -> int:
    """``models export ID DIR``: ID a manifest id, a tiny model id or a path to a GGUF."""
    from pathlib import Path

    from specgate.supply.export import export

    if len(ids) != 2:
        raise model_cache.ModelError(
            "usage: specgate models export ID DIR (a model id or .gguf path, a folder)"
        )
    for path in export(model_cache.model_ref(ids[0], manifest).gguf, Path(ids[1])):
        print(path)
    return 0


def _engine(args: argparse.Namespace) -> int:
    from impl.process.server import claim_stdout, serve
    from impl.registry import MissingExtra, UnknownImpl, resolve

    out = claim_stdout()  # before the adapter loads: nothing it prints reaches the protocol's stdout
    try:
        engine = resolve(args.impl, in_process=True)
    except UnknownImpl as exc:
        print(f"specgate engine: {exc}", file=sys.stderr)
        return 4 if isinstance(exc, MissingExtra) else 2
    return serve(engine, stdout=out)


def _repro(args: argparse.Namespace) -> int:
    """``repro FILE --impl X``: the reproducer's input re-checked on the engine against
    the oracle; prints the divergence; exit 1 while it diverges, 0 once it does not,
    4 for a file that is not a replayable reproducer (``specgate.run.reproducer``)."""
    from impl.registry import UnknownImpl, resolve
    from specgate.run import reproducer, triage
    from specgate.safe_io import text_safety

    try:
        data = reproducer.load(args.file)
        reproducer.model_of(data, args.file)
        engine = resolve(args.impl)
    except (reproducer.ReproError, UnknownImpl) as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    try:
        verdict, same = triage.replay(data, engine)
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # the oracle on an input it cannot take
        print(
            f"specgate: {args.file}: cannot replay: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            file=sys.stderr,
        )
        return 4
    finally:
        engine.close()
    show = text_safety.terminal  # the reproducer's fields and the engine's message: text, never control
    print(
        show(f"reproducer {data.get('group', args.file)} ({data['stage']} · {data['model']}) on {args.impl}:")
    )
    print(show(f"input: {text_safety.json_escaped(data['input'])[:2000]}"))
    if verdict.outcome in ("fail", "error"):
        how = "the same way" if same else f"differently (expected: {data['signature']})"
        print(show(f"still diverges from the oracle, {how}: {verdict.outcome}\n{verdict.message}"))
        return 1
    print(
        show(
            f"no divergence from the oracle: {verdict.outcome}{': ' + verdict.message if verdict.message else ''}"
        )
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    """``report merge``: the shards' JSON reports as one matrix and one Markdown/JSON/HTML/JUnit
    XML report (and the PNG with the ``report`` extra); ``report diff``: two runs compared;
    ``report summary``: Markdown reports with their pictures embedded."""
    from pathlib import Path

    from specgate.reports import junit as report_junit
    from specgate.reports import parity_report as report
    from specgate.reports import summary as report_summary

    if args.action == "diff":
        return _report_diff(args)

    if args.action == "summary":
        from specgate.safe_io import files

        try:
            shown = [report_summary.embedded(Path(name)) for name in args.files]
        except files.UnsafeFile as exc:  # missing, a FIFO, /dev/zero, too large: a usage error
            print(f"specgate: {exc}", file=sys.stderr)
            return 4
        for text in shown:
            print(text)
        return 0

    try:
        merged = report.merge([Path(p) for p in args.files])
    except report.ReportFileError as exc:  # a file that is no report: a usage error
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    except report.MergeError as exc:  # reports that do not make one run
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    print(report.headline(merged.records))
    print(report.matrix_text(merged.records))
    for problem in merged.verdict:
        print(report.terminal(f"specgate: RUN FAILS — {problem}"))
    from specgate.safe_io import files

    junit = Path(args.out) / f"{report.report_stem(merged.impl)}.xml"
    try:
        written = [*report.write_reports(merged, args.out), report_junit.write(merged.records, junit)]
    except files.WriteError as exc:  # --out a file, a full disk: one line, a usage error
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    for path in written:
        print(f"report: {path}")
    return 1 if merged.verdict or any(r.outcome in ("fail", "error") for r in merged.records) else 0


def _report_diff(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specgate.reports import diff as report_diff
    from specgate.safe_io import files

    if len(args.files) != 2:
        print("specgate: report diff takes two JSON reports: OLD NEW", file=sys.stderr)
        return 4
    try:
        old, new = (report_diff.read_report(Path(p)) for p in args.files)
    except report_diff.DiffError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    result = report_diff.diff(old, new)
    summary = report_diff.markdown(result)
    print(summary, end="")
    if args.markdown:
        try:
            files.write_text(Path(args.markdown), summary)
        except files.WriteError as exc:  # a missing folder, /dev/full: 4, never 1 ("regressed")
            print(f"specgate: {exc}", file=sys.stderr)
            return 4
    return 1 if result.regressed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["parity"]:  # every argument after it is the gate run's (pytest parses them)
        from specgate import parity

        return parity.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="specgate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("models", help="the models cache")
    m.add_argument("action", choices=["fetch", "tiny", "list", "path", "verify", "export"])
    m.add_argument("ids", nargs="*")
    m.set_defaults(func=_models)
    sub.add_parser(
        "parity",
        add_help=False,
        help="gate an engine: specgate parity --impl NAME [--models ...] [--stages ...] (--help: its options; --pytest-help: pytest's)",
    )
    e = sub.add_parser("engine", help="serve an adapter over the JSON-lines process protocol")
    e.add_argument("--impl", default="oracle")
    e.set_defaults(func=_engine)
    r = sub.add_parser("repro", help="replay a minimized reproducer from a parity run's reports/repro/")
    r.add_argument("file")
    r.add_argument("--impl", required=True)
    r.set_defaults(func=_repro)
    rp = sub.add_parser("report", help="parity reports")
    rp.add_argument("action", choices=["merge", "diff", "summary"])
    rp.add_argument(
        "files",
        nargs="+",
        help="merge: the shards' JSON reports (parity-*-shard-I-of-N.json); diff: OLD.json NEW.json; "
        "summary: Markdown reports to print with their PNG pictures embedded as data: URIs "
        "(for $GITHUB_STEP_SUMMARY)",
    )
    rp.add_argument("--out", default="reports", help="where the merged report is written")
    rp.add_argument("--markdown", help="diff: also write the summary to this file (a pull-request comment)")
    rp.set_defaults(func=_report)
    from specgate.search.cli import add_parser as add_search_parser

    add_search_parser(sub)
    args = parser.parse_args(argv)
    from impl.envvars import check_all
    from impl.protocol import EngineError

    try:
        check_all()  # every numeric SPECGATE_* setting: a bad one is one line, before anything runs
    except EngineError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    try:
        return args.func(args)
    except model_cache.CacheNotWritable as exc:  # a setup error
        print(f"specgate: {exc}", file=sys.stderr)
        return 4
    except model_cache.ModelError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specgate: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""How many root-cause groups each planted engine of ``tests/engines/`` gets: the
mutants and the fixable engines, gated as a user would (diagnosis on, shrinking off:
the groups do not depend on it), one table row per engine.

    python benchmarks/group_counts.py [--root CHECKOUT] [--only NAME;...] [--keep DIR]

``--root`` gates with another checkout's suite (its ``specgate`` first on the path and
its gates and engines): run it at main and at a branch to compare the number of
groups before and after a change of the grouping. Each row is one real run of a
``cmd:`` engine (a minute or so each on a quiet machine). Each engine's real causes are
known by construction (its ``causes`` in ``ENGINES``: a mutant's one bug, a fixable
engine's defects), so a row also gives the groups per real cause: the engine's groups
(``fail`` and ``error``) over its causes. A ``reference-disagreement`` group is the
references' own cause, not the engine's (the split references' Unicode-version skew
shows with every tokenizer engine, their top-k tie rule with the sampler, HF's NFC
normalization against llama.cpp with an engine that normalizes): those groups have their
own column and are not counted as the engine's. The table ends with the average groups
per cause over the rows gated (issue 35: at most 1.2). ``--keep`` keeps each engine's
reports (``DIR/<engine>/``) to read which group is which cause.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ("split,encode,decode", "qwen3-vocab", "tests/gates/test_tokenizer.py")
TEMPLATE = ("render", "qwen3-vocab", "tests/gates/test_render.py")
#: name -> (real causes, engine script and arguments, stages, models, gate file, more pytest
#: arguments). The causes are the engine's planted defects that fail, err or disagree (the
#: outcomes grouped): one per mutant, one per fixable engine's defect; browser_engine's
#: second defect (long decodes refused) is a refusal, grouped by message apart from them.
ENGINES = {
    "mutant tokenizer_no_lookahead": (1, ["tests/engines/mutants/tokenizer_no_lookahead.py"], "split,encode,decode",
                                      "qwen2.5-coder-0.5b-instruct", "tests/gates/test_tokenizer.py", []),
    "mutant template_swallow_chatml": (1, ["tests/engines/mutants/template_swallow_chatml.py"], *TEMPLATE, []),
    "mutant sampler_top_p_ge": (1, ["tests/engines/mutants/sampler_top_p_ge.py"], "sample",
                                "qwen2.5-coder-0.5b-instruct", "tests/gates/test_sample.py", []),
    "mutant rope_interleaved": (1, ["tests/engines/mutants/rope_interleaved.py"], "logits", "tiny-qwen2-f32",
                                "tests/gates/test_logits.py", ["-k", "not long_code_512"]),
    "mutant stop_per_token": (1, ["tests/engines/mutants/stop_per_token.py"], "generate", "tiny-qwen2-f32",
                              "tests/gates/test_generate.py", []),
    "browser_engine": (1, ["tests/engines/browser_engine.py"], *TOKENIZER, []),
    **{
        f"fixable_tokenizer {d}": (len(d.split(",")), ["tests/engines/fixable_tokenizer.py", f"--defects={d}"],
                                   *TOKENIZER, [])
        for d in ("nfc", "lookahead", "digits3", "fffd", "bos", "lookahead,digits3", "nfc,lookahead")
    },
    **{
        f"fixable_template {d}": (len(d.split(",")), ["tests/engines/fixable_template.py", f"--defects={d}"],
                                  *TEMPLATE, [])
        for d in ("tojson_html", "js_booleans", "untrimmed")
    },
    # Qwen3's template has no default system prompt to leave out: Qwen2.5's has
    "fixable_template no_default_system": (1, ["tests/engines/fixable_template.py", "--defects=no_default_system"],
                                           "render", "qwen2.5-coder-0.5b-instruct", TEMPLATE[2], []),
}  # fmt: skip


def gate(root: Path, name: str, work: Path) -> dict[str, object]:
    causes, script, stages, models, gates, extra = ENGINES[name]
    reports = work / name.replace(" ", "_").replace(",", "+")
    impl = "cmd:" + shlex.join([sys.executable, str(root / script[0]), *script[1:]])
    if not (root / gates).exists():  # the gates live in the package since it carries them
        gates = gates.replace("tests/gates/", "specgate/gates/")
    cmd = [sys.executable, "-m", "pytest", gates, "-p", "no:cacheprovider", "-q", "--impl", impl,
           "--stages", stages, "--models", models, "--report-dir", str(reports), "--shrink-budget", "0", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    found = sorted(reports.glob("parity-*.json"))
    if not found:
        return {"engine": name, "error": (proc.stdout + proc.stderr)[-500:]}
    report = json.loads(found[0].read_text(encoding="utf-8"))
    groups = report["groups"]
    return {
        "engine": name,
        "stages": stages,
        "causes": causes,
        "failing": sum(c["outcome"] in ("fail", "error") for c in report["cases"]),
        "groups": len(groups),
        "ref_groups": sum(g["outcome"] == "reference-disagreement" for g in groups),
        "diagnosed": sum(bool(g.get("diagnosis")) for g in groups),
        "fail_groups": sum(g["outcome"] == "fail" for g in groups),
    }


def selected(only: str) -> list[str]:
    """The engines ``--only`` names: a part equal to an engine's name that engine alone
    (``fixable_tokenizer nfc`` is not also ``fixable_tokenizer nfc,lookahead``), any other
    part every engine whose name contains it; all of them without ``--only``."""
    parts = [o.strip() for o in only.split(";") if o.strip()]
    if not parts:
        return list(ENGINES)
    return [n for n in ENGINES if any(o == n or (o not in ENGINES and o in n) for o in parts)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose suite gates (default: this one)"
    )
    parser.add_argument(
        "--only", default="", help="semicolon-separated engine names or parts of them (default: all)"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep each engine's reports under this directory"
    )
    args = parser.parse_args()
    names = selected(args.only)
    print(f"root: {args.root.resolve()}")
    print(f"{'engine':<40} {'stages':<20} {'failing':>7} {'groups':>6} {'fail groups':>11} {'diagnosed':>9} "
          f"{'ref groups':>10} {'causes':>6} {'groups/cause':>12}")  # fmt: skip
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        for name in names:
            row = gate(args.root.resolve(), name, work)
            if "error" in row:
                print(f"{name:<40} no report: {row['error']!r}")
                continue
            if row["groups"] == row["ref_groups"]:  # the planted defect does not show: no cause to count
                print(f"{name:<40} {row['stages']:<20} no group of the engine: its defect does not show here")
                continue
            ratios.append((row["groups"] - row["ref_groups"]) / row["causes"])
            print(f"{name:<40} {row['stages']:<20} {row['failing']:>7} {row['groups']:>6} "
                  f"{row['fail_groups']:>11} {row['diagnosed']:>9} {row['ref_groups']:>10} {row['causes']:>6} "
                  f"{ratios[-1]:>12.2f}",
                  flush=True)  # fmt: skip
    if ratios:
        print(f"{'average groups per cause':<40} {'':<20} {'':>7} {'':>6} {'':>11} {'':>9} {'':>10} {'':>6} "
              f"{sum(ratios) / len(ratios):>12.2f}  (over {len(ratios)} engine{'s' * (len(ratios) != 1)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

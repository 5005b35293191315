"""How many root-cause groups each planted engine of ``tests/engines/`` gets: the
mutants and the fixable engines, gated as a user would (diagnosis on, shrinking off:
the groups do not depend on it), one table row per engine.

    python benchmarks/group_counts.py [--root CHECKOUT] [--only NAME,...]

``--root`` gates with another checkout's suite (its ``specgate`` first on the path and
its gates and engines): run it at main and at a branch to compare the number of
groups before and after a change of the grouping. Each row is one real run of a
``cmd:`` engine (a minute or so each on a quiet machine).
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
#: name -> (engine script and arguments, stages, models, gate file, more pytest arguments)
ENGINES = {
    "mutant tokenizer_no_lookahead": (["tests/engines/mutants/tokenizer_no_lookahead.py"], "split,encode,decode",
                                      "qwen2.5-coder-0.5b-instruct", "tests/gates/test_tokenizer.py", []),
    "mutant template_swallow_chatml": (["tests/engines/mutants/template_swallow_chatml.py"], *TEMPLATE, []),
    "mutant sampler_top_p_ge": (["tests/engines/mutants/sampler_top_p_ge.py"], "sample",
                                "qwen2.5-coder-0.5b-instruct", "tests/gates/test_sample.py", []),
    "mutant rope_interleaved": (["tests/engines/mutants/rope_interleaved.py"], "logits", "tiny-qwen2-f32",
                                "tests/gates/test_logits.py", ["-k", "not long_code_512"]),
    "mutant stop_per_token": (["tests/engines/mutants/stop_per_token.py"], "generate", "tiny-qwen2-f32",
                              "tests/gates/test_generate.py", []),
    "browser_engine": (["tests/engines/browser_engine.py"], *TOKENIZER, []),
    **{
        f"fixable_tokenizer {d}": (["tests/engines/fixable_tokenizer.py", f"--defects={d}"], *TOKENIZER, [])
        for d in ("nfc", "lookahead", "digits3", "fffd", "bos", "lookahead,digits3", "nfc,lookahead")
    },
    **{
        f"fixable_template {d}": (["tests/engines/fixable_template.py", f"--defects={d}"], *TEMPLATE, [])
        for d in ("tojson_html", "js_booleans", "no_default_system", "untrimmed")
    },
}  # fmt: skip


def gate(root: Path, name: str, work: Path) -> dict[str, object]:
    script, stages, models, gates, extra = ENGINES[name]
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
        "failing": sum(c["outcome"] in ("fail", "error") for c in report["cases"]),
        "groups": len(groups),
        "diagnosed": sum(bool(g.get("diagnosis")) for g in groups),
        "fail_groups": sum(g["outcome"] == "fail" for g in groups),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose suite gates (default: this one)"
    )
    parser.add_argument("--only", default="", help="semicolon-separated parts of engine names (default: all)")
    args = parser.parse_args()
    names = [n for n in ENGINES if not args.only or any(o.strip() in n for o in args.only.split(";"))]
    print(f"root: {args.root.resolve()}")
    print(f"{'engine':<40} {'stages':<20} {'failing':>7} {'groups':>6} {'fail groups':>11} {'diagnosed':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = gate(args.root.resolve(), name, Path(tmp))
            if "error" in row:
                print(f"{name:<40} no report: {row['error']!r}")
                continue
            print(f"{name:<40} {row['stages']:<20} {row['failing']:>7} {row['groups']:>6} "
                  f"{row['fail_groups']:>11} {row['diagnosed']:>9}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

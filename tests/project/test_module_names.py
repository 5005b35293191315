"""One name, one meaning inside ``specgate/``, read from the tree:

* no two modules (or packages) of ``specgate/`` share a name in different roles. A
  stage's parts may share the stage's name across the job packages (``checks/tokenizer.py``
  compares, ``stages/tokenizer.py`` registers, ``diagnose/tokenizer.py`` names causes), and
  the names Python and the command line give one role everywhere (``__init__``,
  ``__main__``, ``cli``: its package's command) are shared by design;
* ``STAGES`` is defined once (the gate's stage registry, ``specgate/stages/``), and there
  is one ``Stage`` class.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPECGATE = ROOT / "specgate"
#: One role wherever they stand.
SAME_ROLE = {"__init__", "__main__", "cli"}
#: The packages a stage's parts live in, one job each (compare, register, diagnose).
JOB_PACKAGES = {"checks", "stages", "diagnose"}


def stage_part_names(root: Path) -> set[str]:
    """The names a stage's parts may share: the gate's stage names (the first argument of
    each ``Stage(...)`` in ``stages/``, read from the source) and the stage modules of
    ``stages/`` (``tokenizer`` holds split, encode and decode)."""
    names = set()
    for path in (root / "stages").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            first = node.args[0] if isinstance(node, ast.Call) and node.args else None
            if (
                getattr(node, "func", None)
                and getattr(node.func, "id", None) == "Stage"
                and first is not None
            ):
                names.add(str(getattr(first, "value", "")))
        if path.stem not in {"__init__", "base"} and not path.stem.endswith("_cases"):
            names.add(path.stem)
    return names


def shared_names(root: Path) -> list[str]:
    """Each name two or more of ``root``'s modules or packages share in different roles,
    as ``name: path, path``."""
    where: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        where[path.stem].append(path)
    for path in sorted(p for p in root.rglob("*") if p.is_dir() and (p / "__init__.py").exists()):
        where[path.name].append(path)
    parts = stage_part_names(root)
    bad = []
    for name, paths in sorted(where.items()):
        if len(paths) < 2 or name in SAME_ROLE:
            continue
        if name in parts and all(p.parent.name in JOB_PACKAGES and p.is_file() for p in paths):
            continue
        bad.append(f"{name}: " + ", ".join(sorted(str(p.relative_to(root.parent)) for p in paths)))
    return bad


def definitions(root: Path, pattern: str) -> list[str]:
    """Each line of ``root``'s modules that defines (assigns, or declares as a class) ``pattern``."""
    regex = re.compile(pattern)
    return [
        f"{path.relative_to(root.parent)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if regex.match(line)
    ]


def test_no_two_specgate_modules_share_a_name_in_different_roles() -> None:
    bad = shared_names(SPECGATE)
    assert not bad, (
        "specgate/ modules sharing a name in different roles (rename by what they hold):\n" + "\n".join(bad)
    )


def test_one_stages_registry_and_one_stage_class() -> None:
    stages = definitions(SPECGATE, r"\s*STAGES\b\s*(:[^=]*)?=")
    stage_classes = definitions(SPECGATE, r"\s*class Stage\b")
    assert len(stages) == 1 and stages[0].startswith("specgate/stages/__init__.py:"), stages
    assert len(stage_classes) == 1 and stage_classes[0].startswith("specgate/stages/base.py:"), stage_classes


def test_the_name_checks_see_a_planted_clash(tmp_path: Path) -> None:
    """The checks are only as good as ``shared_names`` and ``definitions``: in a copy of
    ``specgate/``'s layout, a second ``run.py`` outside the job packages, a ``summary.py``
    in two packages and a second ``STAGES`` are found; a stage's name shared by
    ``checks/`` and ``diagnose/`` is not."""
    root = tmp_path / "specgate"
    for package in ("stages", "checks", "diagnose", "search", "reports", "run"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("", encoding="utf-8")
    (root / "stages" / "__init__.py").write_text("STAGES: dict = {}\n", encoding="utf-8")
    (root / "stages" / "forward.py").write_text('GENERATE = Stage("generate")\n', encoding="utf-8")
    (root / "checks" / "generate.py").write_text("", encoding="utf-8")
    (root / "diagnose" / "generate.py").write_text("", encoding="utf-8")
    assert shared_names(root) == []
    (root / "search" / "run.py").write_text("STAGES = {}\n", encoding="utf-8")
    (root / "search" / "summary.py").write_text("", encoding="utf-8")
    (root / "reports" / "summary.py").write_text("", encoding="utf-8")
    assert shared_names(root) == [
        "run: specgate/run, specgate/search/run.py",
        "summary: specgate/reports/summary.py, specgate/search/summary.py",
    ]
    assert definitions(root, r"\s*STAGES\b\s*(:[^=]*)?=") == [
        "specgate/search/run.py:1",
        "specgate/stages/__init__.py:1",
    ]

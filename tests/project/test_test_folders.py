"""The tests mirror the packages: a test module lives in the folder named by what it tests
(``tests/run/`` tests ``specgate/run/``, ``tests/oracle/`` the oracle, …), never flat in
``tests/``, and every folder of ``tests/`` names a package (or module) of ``specgate/``
or is one of the few known folders below. Read from the tree; a planted flat module and
a planted folder that names nothing are caught (the second test)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Folders of ``tests/`` that name no package of ``specgate/``, and what they hold.
KNOWN = {
    "oracle": "the oracle's own tests (oracle/)",
    "engines": "the adapters of impl/ and the planted engines they are tried on",
    "references": "the reference recorders (nox -s snapshots)",
    "project": "the project as a whole: layers, names, docs, tiers, sessions, CI, packaging",
}
#: Folders that hold no tests of their own.
NOT_TESTS = {"__pycache__", "__snapshots__"}
#: The project-wide modules, the only ones in ``tests/project/``: a test of one package
#: belongs in that package's folder instead.
PROJECT_WIDE = {
    "test_ci_recipe.py",
    "test_docs_paths.py",
    "test_layers.py",
    "test_missing_extras.py",
    "test_module_names.py",
    "test_nox_sessions.py",
    "test_peak_memory_line.py",
    "test_suite_structure.py",
    "test_test_folders.py",
    "test_tiers.py",
}


def is_test_module(path: Path) -> bool:
    """What pytest collects by default (``python_files``: ``test_*.py`` and ``*_test.py``)."""
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


def source_names(source: Path) -> set[str]:
    """The packages and modules of ``specgate/`` a test folder may be named by."""
    packages = {p.parent.name for p in source.glob("*/__init__.py")}
    modules = {p.stem for p in source.glob("*.py") if not p.name.startswith("__")}
    return packages | modules


def misplaced(tests: Path, names: set[str]) -> list[str]:
    """Everything in ``tests`` out of its place, one line each."""
    problems = [
        f"{p.name}: a test module flat in tests/" for p in sorted(tests.iterdir()) if is_test_module(p)
    ]
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name not in NOT_TESTS):
        if folder.name.startswith("."):
            continue
        if folder.name not in names | set(KNOWN):
            problems.append(f"{folder.name}/: names no package of specgate/ and is not a known folder")
        if not (folder / "__init__.py").is_file():
            problems.append(f"{folder.name}/: no __init__.py (its modules would share names with others')")
    project = tests / "project"
    if project.is_dir():
        for p in sorted(project.iterdir()):
            if is_test_module(p) and p.name not in PROJECT_WIDE:
                problems.append(f"project/{p.name}: not a project-wide test: put it in its package's folder")
    return problems


def test_every_test_module_is_in_the_folder_of_what_it_tests() -> None:
    names = source_names(ROOT / "specgate")
    assert {"run", "reports", "supply", "cli"} <= names, names
    problems = misplaced(ROOT / "tests", names)
    assert not problems, "\n".join(problems)
    assert {n for n in KNOWN if (ROOT / "tests" / n).is_dir()} == set(KNOWN), (
        "a known folder is gone: drop it"
    )
    assert {p.name for p in (ROOT / "tests" / "project").glob("test_*.py")} == PROJECT_WIDE


def test_a_flat_module_and_a_folder_that_names_nothing_are_caught(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for folder in ("run", "oracle", "project", "__snapshots__"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("")
    (tests / "cdp.py").write_text("")  # a helper module stays at the top
    (tests / "run" / "test_shard.py").write_text("")
    (tests / "project" / "test_layers.py").write_text("")
    assert misplaced(tests, {"run"}) == []

    (tests / "test_planted.py").write_text("")
    (tests / "planted_test.py").write_text("")
    (tests / "misc").mkdir()
    (tests / "misc" / "__init__.py").write_text("")
    (tests / "reports").mkdir()
    (tests / "project" / "test_report_names.py").write_text("")
    assert misplaced(tests, {"run", "reports"}) == [
        "planted_test.py: a test module flat in tests/",
        "test_planted.py: a test module flat in tests/",
        "misc/: names no package of specgate/ and is not a known folder",
        "reports/: no __init__.py (its modules would share names with others')",
        "project/test_report_names.py: not a project-wide test: put it in its package's folder",
    ]

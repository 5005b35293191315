"""The layers' arrows, read from the source: every import statement (a function's
lazy import included — it is an arrow too) of every module in ``oracle/``,
``impl/`` and ``specgate/``.

* the oracle imports only numpy, regex, jinja2, gguf and the standard library;
* the adapters (``impl/``) never import the suite (``specgate``);
* a third-party adapter (``impl/ecosystem/<engine>/``) imports only the standard library,
  its engine's own package and the shared helpers ``impl/ecosystem/jsonl_engine.py`` and
  ``divergences.py``;
* no two modules import each other, directly or around a longer loop;
* inside ``impl/`` no arrow runs back up: with each subpackage (``impl.process``,
  ``impl.http`` …) one node beside the top-level modules (``impl.protocol``,
  ``impl.registry`` …), the packages do not import each other around a loop either;
* inside ``specgate/`` every subpackage (and top-level module) stands on a floor of
  ``SPECGATE_FLOORS`` and imports only from floors below its own: no arrow runs back up
  or sideways, so there is no circle between them either.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("oracle", "impl", "specgate")
ORACLE_MAY_IMPORT = {"numpy", "regex", "jinja2", "gguf", "oracle", "__future__"}
ECOSYSTEM = ROOT / "impl" / "ecosystem"
# Each ecosystem folder's engine package, by its import name (a new folder must add itself).
ECOSYSTEM_ENGINE_IMPORTS = {
    "minijinja": {"minijinja"},
    "tokie": {"tokie"},
    "mistralrs": {"mistralrs"},
    "tinygrad": {"tinygrad"},
    "llama_cpp_server": {"llama_cpp"},
    "llama_cpp_chat_format": {"llama_cpp"},
    "llama_cpp_builtin_template": {"llama_cpp"},
}
ECOSYSTEM_SHARED = {"jsonl_engine", "divergences", "__future__"}
# specgate's floors, ground floor first (ARCHITECTURE.md, "The floors inside specgate/"):
# a node (a subpackage, or a top-level module) imports only from floors below its own.
SPECGATE_FLOORS: tuple[tuple[str, ...], ...] = (
    ("outcomes", "safe_io", "specgate"),  # the outcome vocabulary; safe files and inert text; the version
    ("supply",),  # the models cache: manifest, fetch, tiny models
    ("upkeep",),  # the corpus, the snapshots, the reference lock, model ids
    ("checks",),  # each stage's comparison with the reference
    ("stages", "diagnose"),  # the stage registry and its cases; the named causes of a divergence
    ("run",),  # a gate run: session, params, outcomes of cases, triage and shrinking
    ("reports",),  # Markdown, JSON, HTML, JUnit of a run; the end of a run
    ("search", "ecosystem"),  # the differential search; the ecosystem table
    ("gates", "plugin", "parity"),  # the gate modules, the pytest plugin, `specgate parity`
    ("cli",),  # the `specgate` command
    ("__main__",),  # `python -m specgate`
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def imported_names(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """Each dotted name ``module`` imports, with its line: ``import a.b`` gives ``a.b``;
    ``from a import b`` gives ``a.b`` when that is a project module, else ``a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in modules else base), node.lineno


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` lies in (``a.b.c`` -> ``a.b`` if that is the longest module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path] | None = None) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Arrows between project modules (``modules``: the project's, by default), and every
    import as ``file:line imports name`` per module."""
    modules = project_modules() if modules is None else modules
    arrows: dict[str, set[str]] = {m: set() for m in modules}
    imports: dict[str, list[str]] = {m: [] for m in modules}
    for module, path in modules.items():
        for name, line in imported_names(module, path, modules):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            imports[module].append(f"{where}:{line} imports {name}")
            target = _owner(name, modules)
            if target is not None and target != module:
                arrows[module].add(target)
    return arrows, imports


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_oracle_imports_only_numpy_regex_jinja2_gguf_and_the_standard_library() -> None:
    _, imports = import_graph()
    allowed = ORACLE_MAY_IMPORT | set(sys.stdlib_module_names)
    stray = [
        line
        for module, lines in imports.items()
        if _top(module) == "oracle"
        for line in lines
        if _top(line.rsplit(" ", 1)[1]) not in allowed
    ]
    assert not stray, "the oracle imports beyond its allowed set:\n" + "\n".join(stray)


def test_the_adapters_never_import_the_suite() -> None:
    _, imports = import_graph()
    upward = [
        line
        for module, lines in imports.items()
        if _top(module) == "impl"
        for line in lines
        if _top(line.rsplit(" ", 1)[1]) == "specgate"
    ]
    assert not upward, "impl/ imports the suite (specgate):\n" + "\n".join(upward)


def ecosystem_strays() -> list[str]:
    """Imports of ``impl/ecosystem/**.py`` beyond the standard library, the folder's own
    engine package and the shared helpers (which themselves may import only the standard library)."""
    modules = project_modules()
    stray = []
    for path in sorted(ECOSYSTEM.rglob("*.py")):
        folder = path.relative_to(ECOSYSTEM).parts[0] if path.parent != ECOSYSTEM else None
        engine = ECOSYSTEM_ENGINE_IMPORTS.get(folder, set()) if folder else set()
        allowed = (
            set(sys.stdlib_module_names) | engine | ({"__future__"} if folder is None else ECOSYSTEM_SHARED)
        )
        if folder is not None and folder not in ECOSYSTEM_ENGINE_IMPORTS:
            stray.append(f"{path.relative_to(ROOT)}: folder {folder!r} missing from ECOSYSTEM_ENGINE_IMPORTS")
        stray += [
            f"{path.relative_to(ROOT)}:{line} imports {name}"
            for name, line in imported_names(module_name(path), path, modules)
            if _top(name) not in allowed
        ]
    return stray


def test_the_ecosystem_adapters_import_only_the_stdlib_their_engine_and_the_shared_helpers() -> None:
    stray = ecosystem_strays()
    assert not stray, "impl/ecosystem/ imports beyond its allowed set:\n" + "\n".join(stray)


def cycles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(arrows.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(arrows):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    arrows, _ = import_graph()
    loops = cycles(arrows)
    assert not loops, "modules importing each other (directly or around a loop):\n" + "\n".join(
        " <-> ".join(loop) for loop in loops
    )


def _package(module: str) -> str:
    """A module's node in the package graph: its subpackage (``impl.process.server`` ->
    ``impl.process``), or itself for a top-level module (``impl.registry``)."""
    return ".".join(module.split(".")[:2])


def package_arrows(arrows: dict[str, set[str]], layer: str) -> dict[str, set[str]]:
    """The arrows of ``layer`` between its packages."""
    out: dict[str, set[str]] = {}
    for module, targets in arrows.items():
        if _top(module) == layer:
            node = _package(module)
            out.setdefault(node, set()).update(
                _package(t) for t in targets if _top(t) == layer and _package(t) != node
            )
    return out


def test_impl_packages_import_in_one_direction() -> None:
    """The registry knows every adapter package (``cmd:`` -> ``impl.process``), so no
    adapter package may import the registry, or anything that leads back to it."""
    arrows, imports = import_graph()
    loops = cycles(package_arrows(arrows, "impl"))
    shown = [
        line
        for loop in loops
        for module, lines in imports.items()
        if _package(module) in loop
        for line in lines
        if _package(line.rsplit(" ", 1)[1]) in set(loop) - {_package(module)}
    ]
    assert not loops, "impl/ packages importing each other (an arrow back up):\n" + "\n".join(
        [" <-> ".join(loop) for loop in loops] + shown
    )


def test_the_cycle_finder_sees_a_loop() -> None:
    """The check above is only as good as ``cycles``: a planted three-module loop and a
    pair are found, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": {"x"}}) == [["x", "y"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def floor_of(node: str) -> int | None:
    """The floor of a specgate node (``specgate.run`` -> 5; ``specgate`` itself, its
    ``__init__`` holding the version, is on the ground floor); None for a node missing
    from the table."""
    name = node.split(".", 1)[1] if "." in node else node
    return next((i for i, floor in enumerate(SPECGATE_FLOORS) if name in floor), None)


def floor_violations(arrows: dict[str, set[str]]) -> list[str]:
    """Every arrow between specgate's nodes that does not run down a floor (upward, or
    sideways on one floor), and every node missing from ``SPECGATE_FLOORS``, one line
    each: ``specgate.run.x -> specgate.reports.y (floor 5 imports floor 6)``."""
    bad = []
    for module, targets in sorted(arrows.items()):
        if _top(module) != "specgate":
            continue
        node = _package(module)
        here = floor_of(node)
        if here is None:
            bad.append(f"{module}: its node {node} stands on no floor of SPECGATE_FLOORS")
            continue
        for target in sorted(targets):
            there = floor_of(_package(target)) if _top(target) == "specgate" else None
            if there is not None and _package(target) != node and there >= here:
                bad.append(f"{module} -> {target} (floor {here} imports floor {there})")
    return bad


def test_specgate_imports_only_from_floors_below() -> None:
    arrows, _ = import_graph()
    bad = floor_violations(arrows)
    assert not bad, "specgate/ imports running up or sideways its floors (SPECGATE_FLOORS):\n" + "\n".join(
        bad
    )
    assert not cycles(package_arrows(arrows, "specgate"))


def test_every_specgate_node_has_a_floor() -> None:
    """The table names every subpackage and top-level module, and nothing that is gone."""
    nodes = {_package(m).partition(".")[2] or "specgate" for m in project_modules() if _top(m) == "specgate"}
    named = {name for floor in SPECGATE_FLOORS for name in floor}
    assert nodes == named, f"missing from the floors: {sorted(nodes - named)}; gone: {sorted(named - nodes)}"


def test_the_floor_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The floor check is only as good as ``floor_violations`` over the real graph: a copy
    of ``specgate/safe_io/files.py`` (ground floor) planted with an import of
    ``specgate.reports.parity_report``, and a lazy one inside a function, is flagged; a
    sideways arrow on one floor (``stages`` -> ``diagnose``) is flagged; the tree as it
    is, is not."""
    planted = tmp_path / "specgate" / "safe_io" / "files.py"
    planted.parent.mkdir(parents=True)
    source = (ROOT / "specgate" / "safe_io" / "files.py").read_text(encoding="utf-8")
    planted.write_text(
        source + "\n\ndef _late():\n    from specgate.reports import parity_report  # noqa\n",
        encoding="utf-8",
    )
    arrows, _ = import_graph({**project_modules(), "specgate.safe_io.files": planted})
    bad = floor_violations(arrows)
    assert bad == ["specgate.safe_io.files -> specgate.reports.parity_report (floor 0 imports floor 6)"], bad
    sideways = {"specgate.stages.base": {"specgate.diagnose.diagnoser"}, "specgate.diagnose.diagnoser": set()}
    assert floor_violations(sideways) == [
        "specgate.stages.base -> specgate.diagnose.diagnoser (floor 4 imports floor 4)"
    ]
    assert floor_violations({"specgate.attic.x": set()}) == [
        "specgate.attic.x: its node specgate.attic stands on no floor of SPECGATE_FLOORS"
    ]

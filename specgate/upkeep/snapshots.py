"""Reference snapshots: what the references said, with where it came from.

One JSON file per (model, stage): ``<root>/<model>/<stage>.json`` =
``{"provenance": {...}, "cases": {case_id: {inputs..., reference output...}}}``: each
case carries the inputs it was recorded on, so a gate reads nothing else. They are
written as plain JSON (``dumps``) by the reference-recording tests
(``tests/references``, run by ``nox -s snapshots`` with ``--record-references``) and
read here by the gates, which need neither torch nor llama.cpp installed. ``<root>`` is the repository's ``snapshots/``, or the directory a
run names with ``--snapshot-dir`` (a user's own GGUF: its snapshots live outside the
repository); the root is passed to every function here, never kept in a global.

Provenance: model id and sha256, the reference adapters and their installed
package versions, the reference lock (``constraints/references.txt``: its name and
sha256, and any recorded package installed off it), the date and the command. A snapshot whose model sha256 differs from the
cached model is refused loudly: the references must be re-run on that model.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT
from impl.protocol import ModelRef
from specgate.safe_io import files
from specgate.upkeep import lock
from specgate.upkeep.snapshot_diff import first_divergence_of_values

SNAPSHOT_ROOT = DATA_ROOT / "snapshots"
REGENERATE = "nox -s snapshots"


class SnapshotError(Exception):
    """A snapshot is missing, malformed, or recorded from a different model file."""


def root_of(config: Any) -> Path:
    """The snapshot root of a pytest run: its ``--snapshot-dir``, else the repository's."""
    chosen = getattr(config.option, "snapshot_dir", None)
    return Path(chosen).expanduser().resolve() if chosen else SNAPSHOT_ROOT


def regenerate_command(model: ModelRef, root: Path = SNAPSHOT_ROOT) -> str:
    """The command that records ``model``'s snapshots under ``root``."""
    if root == SNAPSHOT_ROOT:
        return REGENERATE
    return f"{REGENERATE} -- --model {model.gguf} --snapshot-dir {root}"


def path_for(model_id: str, stage: str, root: Path = SNAPSHOT_ROOT) -> Path:
    """``<root>/<model>/<stage>.json``; a model id that is not one safe path component
    (``..``, a separator, a control character) never reaches the file system."""
    if (why := files.component_problem(model_id)) is not None:
        raise SnapshotError(f"model id {model_id!r} cannot name a snapshot folder: {why}")
    return root / model_id / f"{stage}.json"


#: The largest snapshot file read (the repository's largest is under 1 MB).
MAX_SNAPSHOT_BYTES = 256 << 20


def read_json(path: Path) -> Any:
    """A snapshot file's JSON, read only when it is a regular file of at most
    ``MAX_SNAPSHOT_BYTES`` (``files.read_regular``: a FIFO or ``/dev/zero`` is not read)."""
    try:
        return json.loads(files.read_regular(path, MAX_SNAPSHOT_BYTES, "snapshot").decode("utf-8"))
    except files.UnsafeFile as exc:
        raise SnapshotError(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"malformed snapshot {path}: {str(exc)[:300]}") from None


def case_ids(model_id: str, stage: str, root: Path = SNAPSHOT_ROOT) -> list[str]:
    """The case ids of a snapshot (to parametrize the gates; provenance is checked on load)."""
    data = read_json(path_for(model_id, stage, root))
    if not isinstance(data, dict) or not isinstance(data.get("cases"), dict):
        raise SnapshotError(f"malformed snapshot {path_for(model_id, stage, root)}: no cases object")
    return list(data["cases"])


def check_files(root: Path, model_ids: list[str]) -> None:
    """Every snapshot file of ``model_ids`` under ``root`` (and the construct templates')
    is a regular file of at most ``MAX_SNAPSHOT_BYTES``, before a gate opens it (a FIFO
    would hang the run, ``/dev/zero`` fill its memory): else the run stops with one line
    naming it (``pytest.UsageError``, exit status 4; called by the plugin's usage check)."""
    import pytest

    for model_id in [m for m in model_ids if files.component_problem(m) is None]:
        for path in sorted((root / model_id).glob("*.json")):
            try:
                files.check_regular(path, MAX_SNAPSHOT_BYTES, "snapshot")
            except files.UnsafeFile as exc:
                raise pytest.UsageError(f"{exc}; {repair_hint(model_id, path.stem, root)}") from None


def package_versions(*names: str) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(model: ModelRef, references: dict[str, str], packages: tuple[str, ...]) -> dict[str, Any]:
    """Provenance block for a snapshot recorded on ``model`` by ``references``
    (adapter name -> what it is, e.g. ``"transformers apply_chat_template"``)."""
    installed = package_versions(*packages)
    return {
        "model": model.id,
        "model_sha256": model.sha256,
        "references": references,
        "packages": installed,
        "lock": lock.provenance(installed),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join(["pytest", *sys.argv[1:]]) if sys.argv else REGENERATE,
    }


def available(stage: str, root: Path = SNAPSHOT_ROOT) -> list[str]:
    """Model ids that have a snapshot for ``stage`` under ``root``."""
    if not root.exists():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{stage}.json"))


def repair_hint(model_id: str, stage: str, root: Path = SNAPSHOT_ROOT, gguf: Any = None) -> str:
    """How to get a readable ``stage`` snapshot of ``model_id`` back: the committed file
    from git (the repository's snapshots), else a re-recording into ``root``."""
    if root == SNAPSHOT_ROOT:
        return (
            f"restore the committed file with `git checkout -- snapshots/{model_id}/{stage}.json` "
            f"or re-record it with `{REGENERATE}`"
        )
    return f"re-record it with `{REGENERATE} -- --model {gguf or 'PATH'} --snapshot-dir {root}`"


def read(model_id: str, stage: str, root: Path = SNAPSHOT_ROOT, gguf: Any = None) -> dict[str, Any]:
    """A snapshot file's ``{"provenance": {...}, "cases": {id: {...}}}``, or ``SnapshotError``
    (one line naming the fix) when it cannot be read or is not of that form."""
    path = path_for(model_id, stage, root)
    try:
        data = json.loads(files.read_regular(path, MAX_SNAPSHOT_BYTES, "snapshot").decode("utf-8"))
    except files.UnsafeFile as exc:  # a FIFO, /dev/zero, a file too large to be a snapshot
        problem = str(exc)
    except OSError as exc:
        problem = f"cannot read snapshot file {path}: {exc.strerror or exc}"
    except (ValueError, RecursionError) as exc:  # invalid JSON or invalid UTF-8, or nested without end
        problem = f"malformed snapshot file {path}: not JSON ({(str(exc).splitlines() or [''])[0][:300]})"
    else:
        if not isinstance(data, dict) or not isinstance(data.get("provenance"), dict):
            problem = f"malformed snapshot file {path}: no provenance object"
        elif not isinstance(data.get("cases"), dict):
            problem = f"malformed snapshot file {path}: no cases object"
        elif bad := next((k for k, v in data["cases"].items() if not isinstance(v, dict)), None):
            problem = f"malformed snapshot file {path}: case {bad!r} is not an object"
        else:
            return data
    raise SnapshotError(f"{problem}; {repair_hint(model_id, stage, root, gguf)}")


def load(model: ModelRef, stage: str, root: Path = SNAPSHOT_ROOT) -> dict[str, Any]:
    """The snapshot's cases for ``model``/``stage`` under ``root``, after checking its provenance."""
    path = path_for(model.id, stage, root)
    regenerate = regenerate_command(model, root)
    if not path.exists():
        raise SnapshotError(
            f"no {stage} snapshot for model {model.id!r} ({path}); record it with: {regenerate}"
        )
    data = read(model.id, stage, root, model.gguf)
    prov, cases = data["provenance"], data["cases"]
    if prov.get("model_sha256") != model.sha256:
        which = f"the file {model.gguf}" if model.role == "user" else f"the cached {model.id!r}"
        raise SnapshotError(
            f"STALE SNAPSHOT {path}: recorded from model sha256 {prov.get('model_sha256')} but {which} "
            f"is {model.sha256}. The model changed under its snapshots; regenerate the references with: "
            f"{regenerate}{refetch_hint(model)}"
        )
    return cases


def refetch_hint(model: ModelRef) -> str:
    """For a model the cache provides: the other fix, providing the file the snapshots were recorded from."""
    if model.role in ("user", "corpus"):
        return ""
    if model.id.startswith("tiny-"):
        return " (or, if the snapshots are right, remake the tiny model with `specgate models tiny`)"
    return f" (or, if the snapshots are right, re-fetch the model with `specgate models fetch {model.id}`)"


# ---------------------------------------------------------------------------
# writing (reference-recording tests only)


def dumps(data: dict[str, Any]) -> str:
    """A snapshot's text: JSON with two-space indent, UTF-8 kept readable (not ``\\u``
    escaped), a final newline; the cases sorted by id, each case's fields by name and the
    provenance throughout. Values inside a case keep their order: a conversation's tool
    definitions reach the template in the order they were written. Stable, so a
    re-recording that says the same thing leaves the file byte for byte unchanged."""
    ordered = {
        "cases": {
            case_id: dict(sorted(case.items())) if isinstance(case, dict) else case
            for case_id, case in sorted(data["cases"].items())
        },
        "provenance": json.loads(json.dumps(data["provenance"], sort_keys=True)),
    }
    return json.dumps(ordered, indent=2, ensure_ascii=False) + "\n"


def write(model: ModelRef, stage: str, data: dict[str, Any], root: Path = SNAPSHOT_ROOT) -> Path:
    """Write one snapshot file (``--record-references`` only)."""
    path = path_for(model.id, stage, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(data), encoding="utf-8")
    return path


def recording(request: Any) -> bool:
    """True under ``--record-references`` (``nox -s snapshots``): the reference tests
    write the snapshots instead of re-checking them."""
    return bool(request.config.getoption("--record-references"))


def old_record_spelling(paths: list[Path], recorders: Path, syrupy_loaded: bool) -> str:
    """The usage error for ``--snapshot-update`` where it once meant ``--record-references``
    (before syrupy came back and took the name): without syrupy it updates nothing, and in a
    run of only the reference recorders (every one of the run's ``paths`` inside
    ``recorders``, ``tests/references``) it would re-check the references, not record them.
    Empty where it means syrupy's update of the suite's own layout snapshots."""
    hint = "to record the reference snapshots pass --record-references (nox -s snapshots does)"
    if not syrupy_loaded:
        return f"--snapshot-update updates syrupy's layout snapshots and syrupy is not loaded; {hint}"
    inside = [p == recorders or recorders in p.parents for p in paths]
    if inside and all(inside):
        return f"--snapshot-update now updates syrupy's layout snapshots, and {recorders.parent.name}/{recorders.name} has none; {hint}"
    return ""


#: ``drift(case_id, stored_case, live_case)``: None when the live reference still says
#: what the stored case says, else why not.
Drift = Callable[[str, Any, Any], "str | None"]


def exact(case_id: str, stored: Any, live: Any) -> str | None:
    """Outputs with no floating point in them (ids, text, metadata) must not change at all."""
    return first_divergence_of_values(stored, json.loads(json.dumps(live)))


#: ``user_properties`` key under which a re-check leaves what drifted (read by ``specgate.upkeep.drift``).
DRIFT_PROPERTY = "specgate-drift"


def note_drift(
    request: Any,
    model: ModelRef,
    stage: str,
    packages: tuple[str, ...],
    stored: dict[str, Any],
    live: dict[str, Any],
    changed: dict[str, str],
) -> None:
    """Leave the re-check's findings on the test item, as data, for the drift report."""
    request.node.user_properties.append(
        (
            DRIFT_PROPERTY,
            {
                "model": model.id,
                "stage": stage,
                "packages": list(packages),
                "added": sorted(live.keys() - stored.keys()),
                "removed": sorted(stored.keys() - live.keys()),
                "changed": changed,
                "cases": len(stored),
            },
        )
    )


def record(
    request: Any,
    reference: Any,
    model: ModelRef,
    stage: str,
    cases: dict[str, Any],
    references: dict[str, str],
    packages: tuple[str, ...],
    drift: Drift = exact,
) -> None:
    """Record (``--record-references``) or re-check the reference output ``cases``.

    ``reference`` is the adapter that produced them; anything but a reference
    adapter is refused — the engine under test never writes its own expectations.
    Without ``--record-references`` the live reference output is compared with the
    stored cases by ``drift``, so a drifted reference or model is caught. Stages
    whose references compute in floating point pass their own ``drift``: logits and
    margins differ in their last bits between CPUs and BLAS builds (the snapshots
    were recorded on one machine, CI may run on another), so those stages hold the
    live reference to the tolerances of the gates their snapshots feed.
    """
    if not getattr(reference, "is_reference", False):
        raise SnapshotError(
            f"refusing to write a snapshot from {getattr(reference, 'name', reference)!r}: "
            "only reference adapters may record snapshots"
        )
    root = root_of(request.config)
    if recording(request):
        write(model, stage, {"provenance": provenance(model, references, packages), "cases": cases}, root)
        return
    stored = load(model, stage, root)
    missing = sorted(set(stored) ^ set(cases))
    changed = {k: why for k in cases if k in stored and (why := drift(k, stored[k], cases[k]))}
    if missing or changed:
        note_drift(request, model, stage, packages, stored, cases, changed)
    assert not missing, (
        f"{model.id}/{stage}: case ids differ between snapshot and live reference: {missing[:10]}"
    )
    first = next(iter(changed), None)
    assert not changed, (
        f"{model.id}/{stage}: the live reference no longer matches the snapshot for {len(changed)} cases, "
        f"first {first!r}:\n  {changed.get(first)}\nregenerate with: {regenerate_command(model, root)}"
    )


def stages_of(model_id: str, root: Path = SNAPSHOT_ROOT) -> list[str]:
    """The stages that have a snapshot for ``model_id`` under ``root``."""
    folder = root / model_id
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

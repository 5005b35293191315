"""The reference lock (``constraints/references.txt``, ``specgate.upkeep.lock``), the
floors in ``pyproject.toml`` it must satisfy, and the drift report's rendering."""

from __future__ import annotations

import sys

import pytest
from packaging.requirements import Requirement

from specgate.upkeep import drift, lock

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MUST_BE_LOCKED = (
    "torch",
    "transformers",
    "tokenizers",
    "llama-cpp-python",
    "tiktoken",
    "jinja2",
    "regex",
    "gguf",
    "numpy",
    "hypothesis",
    "pytest",
)


def test_the_lock_pins_every_reference_exactly():
    pins = lock.locked()
    assert [name for name in MUST_BE_LOCKED if name not in pins] == []
    assert pins["torch"] == "2.13.0"  # the CPU wheel; a local label would not resolve on a fresh index


def test_locked_versions_satisfy_the_pyproject_floors():
    """A floor above the lock (or a lock below a floor) makes a fresh install unresolvable."""
    project = tomllib.loads((lock.ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    pins = lock.locked()
    unmet = []
    for text in requirements:
        req = Requirement(text)
        name = lock.canonical(req.name)
        if name in pins and req.specifier and not req.specifier.contains(pins[name], prereleases=True):
            unmet.append(f"{text} vs locked {pins[name]}")
    assert unmet == []


def test_malformed_lock_lines_are_refused_by_line():
    assert lock.parse("# comment\nRegex==2026.9.29  # floor\n\nllama_cpp_python==0.3.36\n") == {
        "regex": "2026.9.29",
        "llama-cpp-python": "0.3.36",
    }
    with pytest.raises(lock.LockError, match=r"lock:2: expected 'name==version', got 'regex>=2026'"):
        lock.parse("numpy==2.4.6\nregex>=2026\n")
    with pytest.raises(lock.LockError, match="numpy is locked twice"):
        lock.parse("numpy==2.4.6\nNumPy==2.4.5\n")


def test_local_labels_and_off_lock_packages_in_provenance(tmp_path, monkeypatch):
    assert lock.same_release("2.13.0", "2.13.0+cpu")
    assert not lock.same_release("2.13.0", "2.12.1+cpu")
    assert not lock.same_release("5.24.0", None)
    pins = tmp_path / "references.txt"
    pins.write_text("transformers==5.24.0\njinja2==3.1.6\n", encoding="utf-8")
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    block = lock.provenance({"transformers": "5.25.0", "jinja2": "3.1.6"}, pins)
    assert block["file"] == "references.txt"
    assert block["sha256"] == lock.sha256(pins)
    assert block["off_lock"] == {"transformers": {"locked": "5.24.0", "installed": "5.25.0"}}


def test_drift_report_names_versions_and_first_divergences():
    run = drift.DriftRun(passed=3)
    run.drifts.append(
        {
            "model": "qwen3-vocab",
            "stage": "render",
            "packages": ["transformers", "jinja2"],
            "added": [],
            "removed": [],
            "changed": {"tool-call/content-null": "at ['prompt'], character 40: 'a' -> 'b'"},
            "cases": 23,
        }
    )
    run.broken.append(
        ("tests/references/test_logits.py::test_record_logits[x]", "model missing from the cache")
    )
    report = drift.render(run)
    row = next(line for line in report.splitlines() if line.startswith("| transformers |"))
    assert f"| {lock.locked()['transformers']} |" in row
    assert "qwen3-vocab/render" in row
    assert "`tool-call/content-null`: at ['prompt'], character 40: 'a' -> 'b'" in report
    assert "1 cases changed in 1 model/stage re-checks; 1 re-checks could not run." in report
    assert "model missing from the cache" in report


def test_snapshot_provenance_records_installed_versions_and_the_lock(tmp_path):
    from impl.protocol import ModelRef
    from specgate.upkeep import snapshots

    model = ModelRef(id="tiny", gguf=tmp_path / "tiny.gguf", sha256="ab" * 32)
    prov = snapshots.provenance(model, {"hf": "transformers"}, ("transformers", "jinja2"))
    assert prov["packages"] == {
        "transformers": lock.installed("transformers"),
        "jinja2": lock.installed("jinja2"),
    }
    assert prov["lock"]["file"] == "constraints/references.txt"
    assert prov["lock"]["sha256"] == lock.sha256()

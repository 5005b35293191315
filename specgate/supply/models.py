"""The models manifest (``corpus/models.toml``) and the local model cache.

Cache layout: ``$SPECGATE_CACHE`` (default ``$XDG_CACHE_HOME/specgate`` or
``~/.cache/specgate``) / ``models/<id>/<file>``; tokenizer-file models keep their
HF / tiktoken files beside the derived GGUF. ``--model`` also accepts a path to any
GGUF, so users can gate their own cached files.

The cache verifies what it serves: every file with a known sha256 (the manifest's pin,
else the ``<file>.sha256`` sidecar ``fetch`` / ``tiny`` wrote) is hashed and compared
before ``model_ref`` hands it out. Hashing a 500 MB model on every run would cost
seconds, so the result is stamped beside the file (``<file>.verified``: size, mtime_ns,
inode, sha256) and the file is hashed again only when one of those changes;
``specgate models verify`` ignores the stamps and hashes everything in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from impl import protocol
from impl.datafiles import DATA_ROOT
from impl.envvars import cache_dir
from impl.protocol import ModelRef
from specgate.safe_io import files
from specgate.supply import tiny_specs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = DATA_ROOT / "corpus" / "models.toml"


class ModelError(Exception):
    """A model is missing, unknown, or does not match its manifest entry."""


class CorruptModelError(ModelError):
    """A cached file does not hash to the sha256 it was fetched with: the file is damaged
    (or left over from an older manifest), never the engine's fault."""

    def __init__(self, model_id: str, path: Path, expected: str, actual: str, repair: str) -> None:
        self.model_id, self.path, self.repair = model_id, path, repair
        self.expected, self.actual = expected, actual
        super().__init__(
            f"model {model_id!r}: cached file {path} is corrupt: sha256 is {actual}, expected {expected}; "
            f"repair it with: {repair}"
        )


@dataclass(frozen=True)
class Source:
    dist: str
    version: str
    member: str
    sha256: str | None = None
    size: int | None = None  # bytes of the member (extraction is capped by it)


@dataclass(frozen=True)
class ModelEntry:
    id: str
    architecture: str
    role: str
    upstream: str
    file: str
    assemble: str
    sources: tuple[Source, ...]
    size: int | None = None
    sha256: str | None = None
    derive: str | None = None
    gguf_sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def expected_gguf_sha256(self) -> str | None:
        return self.gguf_sha256 if self.derive else self.sha256


def model_dir(model_id: str) -> Path:
    return cache_dir() / "models" / model_id


class CacheNotWritable(ModelError):
    """The cache directory cannot be written (a setup error: exit status 4)."""


def writable(folder: Path) -> Path:
    """``folder`` (inside the cache), created if need be; a cache that cannot hold it — a
    file in its place, no permission, a read-only disk — is one ``CacheNotWritable`` line
    naming the cache directory."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise CacheNotWritable(
            f"the cache directory {cache_dir()} is not writable ({folder}: {exc.strerror or exc}); "
            "set SPECGATE_CACHE to a writable directory"
        ) from None
    return folder


def load_manifest(path: Path = MANIFEST) -> dict[str, ModelEntry]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    entries = {}
    known = {f for f in ModelEntry.__dataclass_fields__ if f != "extra"}
    for raw in data.get("model", []):
        raw = dict(raw)
        sources = tuple(Source(**s) for s in raw.pop("sources", []))
        extra = {k: raw.pop(k) for k in list(raw) if k not in known}
        entry = ModelEntry(sources=sources, extra=extra, **raw)
        entries[entry.id] = entry
    return entries


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# -- verification: hash once per (size, mtime_ns, inode) ---------------------------------------

STAMP_SUFFIX = ".verified"


def _identity(st: os.stat_result) -> dict[str, int]:
    """What must stay the same for a stamp to stand for the file's bytes."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def _stamped_sha256(path: Path, st: os.stat_result) -> str | None:
    """The sha256 the stamp beside ``path`` records, if it was taken of this very file state."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        digest = stamp["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    same = {k: stamp.get(k) for k in ("size", "mtime_ns", "inode")} == _identity(st)
    return digest if same and isinstance(digest, str) else None


def record_verified(path: Path, digest: str, st: os.stat_result | None = None) -> None:
    """Stamp ``path`` as hashing to ``digest`` in its current (or the given) state. Written
    atomically; a cache that is not writable only costs a re-hash next time."""
    st = path.stat() if st is None else st
    stamp = _stamp_path(path)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({**_identity(st), "sha256": digest}) + "\n")
        os.replace(tmp, stamp)
    except OSError:
        tmp.unlink(missing_ok=True)


def file_sha256(path: Path, full: bool = False) -> str:
    """sha256 of a cache file: taken from its stamp while size, mtime_ns and inode are
    unchanged, else (or with ``full``) hashed and stamped again."""
    before = path.stat()
    if not full and (digest := _stamped_sha256(path, before)) is not None:
        return digest
    digest = sha256_file(path)
    if _identity(path.stat()) == _identity(before):  # not rewritten while we were reading it
        record_verified(path, digest, before)
    return digest


def verify_file(path: Path, expected: str | None, model_id: str, repair: str, full: bool = False) -> str:
    """``path``'s sha256, which must be ``expected`` (when known); a mismatch is a
    ``CorruptModelError`` naming the file, both hashes and the command that repairs it."""
    actual = file_sha256(path, full=full)
    if expected is not None and actual != expected:
        raise CorruptModelError(model_id, path, expected, actual, repair)
    return actual


def member_name(source: Source) -> str:
    """The file name a ``copy`` source is kept under beside the GGUF."""
    return source.member.rsplit("/", 1)[-1]


def sidecar_sha256(gguf: Path) -> str | None:
    """The sha256 ``fetch`` / ``tiny`` recorded in ``<file>.sha256`` when they wrote ``gguf``."""
    sidecar = gguf.with_name(gguf.name + ".sha256")
    try:
        return sidecar.read_text().strip() or None
    except OSError:
        return None


def kept_sources(entry: ModelEntry) -> list[tuple[Path, Source]]:
    """The source files a tokenizer-files model keeps beside its GGUF (``copy`` assembly)."""
    if entry.role != "tokenizer-files" or entry.assemble != "copy":
        return []
    return [(model_dir(entry.id) / member_name(s), s) for s in entry.sources]


def verify_entry(entry: ModelEntry, full: bool = False) -> str:
    """Check every cached file of ``entry`` against its sha256 (the GGUF against the manifest
    pin, else its sidecar; kept sources against their pins); return the GGUF's sha256."""
    repair = f"specgate models fetch {entry.id}"
    gguf = model_dir(entry.id) / entry.file
    expected = entry.expected_gguf_sha256 or sidecar_sha256(gguf)
    digest = verify_file(gguf, expected, entry.id, repair, full=full)
    for path, source in kept_sources(entry):
        if source.sha256 and path.exists():
            verify_file(path, source.sha256, entry.id, repair, full=full)
    return digest


def verify_tiny(model_id: str, full: bool = False) -> str:
    """Check a generated tiny model against the sha256 ``specgate models tiny`` recorded."""
    gguf = tiny_gguf(model_id)
    return verify_file(gguf, sidecar_sha256(gguf), model_id, "specgate models tiny", full=full)


def _file_sha256_cached(path: Path) -> str:
    """sha256 of a user-supplied GGUF, remembered in the cache (never beside the user's file)
    keyed by path, size, mtime and inode."""
    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    key = hashlib.sha256(key.encode()).hexdigest()[:32]
    memo = writable(cache_dir() / "sha256") / key
    if memo.is_file():
        return memo.read_text().strip()
    digest = sha256_file(path)
    memo.write_text(digest)
    return digest


def model_ref(spec: str, manifest: dict[str, ModelEntry] | None = None) -> ModelRef:
    """A ``ModelRef`` for a manifest id (fetched, and its files verified: a damaged one is a
    ``CorruptModelError``), a tiny model id (generated, verified likewise) or a path to a GGUF."""
    manifest = load_manifest() if manifest is None else manifest
    if spec in manifest:
        entry = manifest[spec]
        folder = model_dir(spec)
        gguf = folder / entry.file
        if not gguf.exists():
            raise ModelError(
                f"model {spec!r} is not in the cache ({gguf}); run: specgate models fetch {spec}"
            )
        digest = verify_entry(entry)

        def beside(name: str) -> Path | None:
            return folder / name if (folder / name).exists() else None

        return ModelRef(
            id=spec,
            gguf=gguf,
            sha256=digest,
            role=entry.role,
            tokenizer_json=beside("tokenizer.json"),
            tokenizer_config=beside("tokenizer_config.json"),
            tiktoken=next(iter(sorted(folder.glob("*.tiktoken"))), None),
            extra={"architecture": entry.architecture, **entry.extra},
        )
    if (ref := _tiny_ref(spec)) is not None:
        return ref
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" or path.exists():
        if not path.is_file():
            raise ModelError(f"--model {spec!r}: no such GGUF file")
        if (why := files.component_problem(path.stem)) is not None:  # its snapshots live in DIR/<id>/
            raise ModelError(
                f"--model {spec!r}: its model id {path.stem!r} (the file name without .gguf) cannot name "
                f"a snapshot folder: {why}; rename the file"
            )
        digest = _file_sha256_cached(path)
        holds = gguf_holds(path)
        return ModelRef(
            id=path.stem,
            gguf=path,
            sha256=digest,
            role="user",
            extra=holds,
            weights=holds.get("weights", False),
        )
    raise ModelError(
        f"unknown model {spec!r}; manifest ids: {', '.join(manifest)}; or pass a path to a .gguf"
    )


def is_known_id(model_id: str) -> bool:
    """Whether ``model_id`` names a manifest model or a tiny one (cached or not)."""
    return model_id in load_manifest() or tiny_specs.parse_id(model_id) is not None


def has_weights(model: ModelRef) -> bool:
    """Whether ``model`` has weights to run (logits, sample and generate can be recorded
    and gated): by its role, or for a user's GGUF by whether the file holds tensors."""
    return protocol.has_weights(model)


def has_chat_template(model: ModelRef) -> bool:
    """Whether a user's GGUF carries ``tokenizer.chat_template`` (render and template stages)."""
    return model.role == "user" and bool(model.extra.get("chat_template"))


def gguf_holds(path: Path) -> dict[str, bool]:
    """What a user's GGUF holds, read from its header: ``weights`` (tensors) and
    ``chat_template``. Empty for a file that is not a readable GGUF (``--model``'s
    usage check reports that one)."""
    from oracle.gguf import GGUFError, open_gguf

    try:
        gguf = open_gguf(path, header_only=True)
    except GGUFError:
        return {}
    return {"weights": bool(gguf.tensors), "chat_template": "tokenizer.chat_template" in gguf.metadata}


def _tiny_ref(spec: str) -> ModelRef | None:
    """The generated tiny model ``spec`` (``tiny-<family>-<type>``, see specgate.supply.tiny), or None."""
    parsed = tiny_specs.parse_id(spec)
    if parsed is None:
        return None
    gguf = tiny_gguf(spec)
    if not gguf.exists():
        raise ModelError(f"tiny model {spec!r} is not generated ({gguf}); run: specgate models tiny")
    digest = verify_tiny(spec)
    extra = {"architecture": tiny_specs.FAMILIES[parsed[0]].arch, "tiny": True}
    return ModelRef(id=spec, gguf=gguf, sha256=digest, role="full-weights", extra=extra, loader="dequantized")


def cached_models(manifest: dict[str, ModelEntry] | None = None) -> list[str]:
    """Manifest ids whose GGUF is present in the cache, in manifest order."""
    manifest = load_manifest() if manifest is None else manifest
    return [m for m, e in manifest.items() if (model_dir(m) / e.file).exists()]


def cached_tiny_models() -> list[str]:
    """The generated tiny models present in the cache (``specgate models tiny``)."""
    return [m for m in tiny_specs.model_ids() if tiny_gguf(m).exists()]


def tiny_gguf(model_id: str) -> Path:
    """Where the generated tiny model ``model_id`` lives in the cache."""
    return model_dir(model_id) / f"{model_id}.gguf"

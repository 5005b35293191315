"""The models manifest (``corpus/models.toml``) and the local model cache.

Cache layout: ``$SPECGATE_CACHE`` (default ``$XDG_CACHE_HOME/specgate`` or
``~/.cache/specgate``) / ``models/<id>/<file>``; tokenizer-file models keep their
HF / tiktoken files beside the derived GGUF. ``--model`` also accepts a path to any
GGUF, so users can gate their own cached files.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from impl.protocol import ModelRef

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MANIFEST = PROJECT_ROOT / "corpus" / "models.toml"


class ModelError(Exception):
    """A model is missing, unknown, or does not match its manifest entry."""


@dataclass(frozen=True)
class Source:
    dist: str
    version: str
    member: str
    sha256: str | None = None


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


def cache_dir() -> Path:
    if env := os.environ.get("SPECGATE_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specgate"


def model_dir(model_id: str) -> Path:
    return cache_dir() / "models" / model_id


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


def _file_sha256_cached(path: Path) -> str:
    """sha256 of a user-supplied GGUF, remembered beside the cache keyed by size+mtime."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:32]
    memo = cache_dir() / "sha256" / key
    if memo.exists():
        return memo.read_text().strip()
    digest = sha256_file(path)
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest


def model_ref(spec: str, manifest: dict[str, ModelEntry] | None = None) -> ModelRef:
    """A ``ModelRef`` for a manifest id (must be fetched) or a path to a GGUF file."""
    manifest = load_manifest() if manifest is None else manifest
    if spec in manifest:
        entry = manifest[spec]
        folder = model_dir(spec)
        gguf = folder / entry.file
        if not gguf.exists():
            raise ModelError(
                f"model {spec!r} is not in the cache ({gguf}); run: specgate models fetch {spec}"
            )
        digest = (
            (folder / (entry.file + ".sha256")).read_text().strip()
            if (folder / (entry.file + ".sha256")).exists()
            else (entry.expected_gguf_sha256 or _file_sha256_cached(gguf))
        )

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
        return ModelRef(id=path.stem, gguf=path, sha256=_file_sha256_cached(path), role="user")
    raise ModelError(
        f"unknown model {spec!r}; manifest ids: {', '.join(manifest)}; or pass a path to a .gguf"
    )


def _tiny_ref(spec: str) -> ModelRef | None:
    """The generated tiny model ``spec`` (``tiny-<family>-<type>``, see specgate.tiny), or None."""
    from specgate import tiny

    parsed = tiny.parse_id(spec)
    if parsed is None:
        return None
    gguf = tiny.gguf_path(spec)
    if not gguf.exists():
        raise ModelError(f"tiny model {spec!r} is not generated ({gguf}); run: specgate models tiny")
    sidecar = gguf.with_name(gguf.name + ".sha256")
    digest = sidecar.read_text().strip() if sidecar.exists() else _file_sha256_cached(gguf)
    extra = {"architecture": tiny.FAMILIES[parsed[0]].arch, "tiny": True}
    return ModelRef(id=spec, gguf=gguf, sha256=digest, role="full-weights", extra=extra)


def cached_models(manifest: dict[str, ModelEntry] | None = None) -> list[str]:
    """Manifest ids whose GGUF is present in the cache, in manifest order."""
    manifest = load_manifest() if manifest is None else manifest
    return [m for m, e in manifest.items() if (model_dir(m) / e.file).exists()]


def cached_tiny_models() -> list[str]:
    """The generated tiny models present in the cache (``specgate models tiny``)."""
    from specgate import tiny

    return [m for m in tiny.model_ids() if tiny.gguf_path(m).exists()]

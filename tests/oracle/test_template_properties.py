"""Property tests: random conversations render identically in the oracle and transformers.

Each model's own template (Qwen2.5-Coder, R1-Distill, Qwen3) gets conversations
drawn from roles, Unicode text and text that looks like template syntax or special
tokens. Two properties:

* well-formed conversations (system/user/assistant turns with string content,
  optional reasoning) always render in the oracle — never a refusal, never an
  exception — and equal transformers' ``apply_chat_template`` byte for byte;
* any conversation (tool turns, tool calls with dict or JSON-string arguments,
  missing content, ``enable_thinking``): the oracle renders exactly what
  transformers renders, or refuses exactly when transformers raises.

Each drawn conversation goes through all three templates. The number of examples
comes from the hypothesis profile (``ci``: 1000 per property): drawing an example
costs ~5-15 ms (machine load dependent), rendering it ~1 ms per template and
engine, so the two properties take ~20-40 s in CI; loading transformers' GGUF
tokenizers (shared with the render references) dominates the rest.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.oracle import OracleEngine
from impl.protocol import Unsupported
from specgate.outcomes.gate import text_diff
from specgate.supply import models as model_cache
from specgate.supply.models import model_ref
from specgate.upkeep import corpus
from tests.hypothesis_budget import examples

pytestmark = pytest.mark.live

FRAGMENTS = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "{{ messages }}",
    "{% endfor %}",
    "{{ raise_exception('x') }}",
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    " ",
    "'",
    '"',
    "\\",
    "é",
    "東京",
    "🙂",
    "👩‍👩‍👧",
    "\u200b",
    "\x00",
]
TEXT = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(FRAGMENTS)), max_size=4).map("".join)
ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(["city", "tz", "n"]), st.one_of(TEXT, st.integers(-5, 5)), max_size=2),
    st.sampled_from(['{"city": "Paris"}', "{}", '{"q": "東京"}']),
)
TOOL_CALL = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["get_weather", "get_time"]), "arguments": ARGUMENTS}
        ),
    }
)

WELL_FORMED = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": TEXT},
        optional={"reasoning_content": TEXT},
    ),
    min_size=1,
    max_size=6,
)
ANY_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": st.one_of(TEXT, st.none()),
        "reasoning_content": TEXT,
        "tool_calls": st.lists(TOOL_CALL, min_size=1, max_size=2),
    },
)
KWARGS = st.fixed_dictionaries({}, optional={"enable_thinking": st.booleans()})

MODELS = [m for m in corpus.TEMPLATE_MODELS if m in model_cache.cached_models()]


@pytest.fixture(scope="module")
def engines(reference):
    if not MODELS:
        pytest.skip("no model with a chat template is cached (specgate models fetch)")
    return [model_ref(m) for m in MODELS], OracleEngine(), reference("hf")


def outcome(engine, model, messages, gen, kwargs):
    try:
        return "prompt", engine.render(model, messages, gen, **kwargs)
    except Unsupported as exc:
        return "refused", str(exc)


# 1000: conversations with template syntax, Unicode and tool calls are a large input space, and
# the time is not in the examples (~1 ms per template and engine) but in loading transformers'
# tokenizers for the three templates (shared with the render references).
@examples(ci=1000)
@given(messages=WELL_FORMED, gen=st.booleans(), kwargs=KWARGS)
def test_well_formed_conversations_render_like_transformers(engines, messages, gen, kwargs):
    models, oracle, hf = engines
    for model in models:
        expected = hf.render(model, messages, gen, **kwargs)
        got = oracle.render(model, messages, gen, **kwargs)  # must not raise
        diff = text_diff(expected, got)
        assert diff is None, f"{model.id}: oracle render differs from transformers for {messages!r}\n{diff}"


# 1000: conversations with template syntax, Unicode and tool calls are a large input space, and
# the time is not in the examples (~1 ms per template and engine) but in loading transformers'
# tokenizers for the three templates (shared with the render references).
@examples(ci=1000)
@given(messages=st.lists(ANY_MESSAGE, min_size=1, max_size=6), gen=st.booleans(), kwargs=KWARGS)
def test_any_conversation_renders_or_refuses_like_transformers(engines, messages, gen, kwargs):
    models, oracle, hf = engines
    for model in models:
        expected = outcome(hf, model, messages, gen, kwargs)
        got = outcome(oracle, model, messages, gen, kwargs)
        assert expected[0] == got[0], (
            f"{model.id}: transformers {expected[0]} ({expected[1][:200]!r}) but the oracle {got[0]} "
            f"({got[1][:200]!r}) for {messages!r}"
        )
        if expected[0] == "prompt":
            diff = text_diff(expected[1], got[1])
            assert diff is None, (
                f"{model.id}: oracle render differs from transformers for {messages!r}\n{diff}"
            )

"""A server whose answers have another shape than its endpoint's (a JSON list where an
object belongs) gives every case an ``error`` naming the endpoint, never a *fail* from
an ``AttributeError`` (issue 38: ``/props`` answering a list failed 12 cases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from impl.http.engine import HttpEngine
from impl.protocol import EngineError, ModelRef
from tests.engines.loopback import LlamaServerHandler, serving

MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)


class ListProps(LlamaServerHandler):
    """llama.cpp's server, but ``/props`` (and every POST) answers a JSON list."""

    props: ClassVar[Any] = [1, 2, 3]

    def do_POST(self) -> None:
        self.answer(["not", "an", "object"])


class StringTokens(LlamaServerHandler):
    """``/props`` is an object; ``/tokenize`` names its tokens as a string."""

    def do_POST(self) -> None:
        self.answer({"tokens": "abc", "content": 7, "prompt": ["x"]})


@pytest.mark.parametrize("handler", [ListProps, StringTokens])
@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.encode(MODEL, "hi", False),
        lambda e: e.decode(MODEL, [1, 2]),
        lambda e: e.render(MODEL, [{"role": "user", "content": "hi"}]),
    ],
    ids=["encode", "decode", "render"],
)
def test_a_misshapen_answer_is_an_error_naming_the_server(handler: type, call: Any) -> None:
    with serving(handler) as url:
        engine = HttpEngine(url, timeout=20)
        with pytest.raises(
            EngineError, match=rf"http: {url}.* answered .* in a shape this adapter cannot read"
        ):
            call(engine)

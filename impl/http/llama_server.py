"""llama.cpp's own server (``llama-server``), found by ``/props``: ``/tokenize``,
``/detokenize``, ``/apply-template``, ``/completion`` with ``n_probs``. Prompts
travel as ids and candidates come back as ids, so nothing is mapped through text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impl import bounds
from impl.http.transport import GREEDY, HttpClient
from impl.protocol import ModelRef


class LlamaServer:
    name = "llama.cpp"
    capabilities = frozenset({"encode", "decode", "render", "logits", "generate"})

    def __init__(self, client: HttpClient, top_k: int, served: str | None):
        self.client, self.top_k, self.served = client, top_k, served

    @classmethod
    def probe(cls, client: HttpClient, top_k: int) -> LlamaServer:
        """The server at ``client``'s URL as llama.cpp's; ``ClientError`` if it has no ``/props``."""
        return cls(client, top_k, client.get("/props").get("model_path"))

    def encode(self, text: str, parse_special: bool) -> list[int]:
        body = {"content": text, "add_special": False, "parse_special": parse_special}
        return [
            int(t)
            for t in self.client.post("/tokenize", body, bounds.answer_items("encode", {"text": text}, None))[
                "tokens"
            ]
        ]

    def decode(self, ids: Sequence[int]) -> bytes:
        return self.client.post("/detokenize", {"tokens": [int(i) for i in ids]})["content"].encode("utf-8")

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        return self.client.post("/apply-template", {"messages": list(messages)})["prompt"]

    def logit_rows(self, model: ModelRef, ids: list[int], positions: list[int]) -> list[dict[int, float]]:
        """Top-k log-probs after each of ``positions``, one prefix per request (the
        server's prompt cache keeps the shared prefix)."""
        return [self._next(ids[: i + 1]) for i in positions]

    def generate(
        self, model: ModelRef, ids: Sequence[int], max_tokens: int, stop: list[str]
    ) -> tuple[list[int | None], str, str]:
        """Greedy continuation: (new ids, text, finish reason)."""
        body = {
            "prompt": [int(i) for i in ids],
            "n_predict": max_tokens,
            "stop": stop,
            "n_probs": 1,
            "cache_prompt": True,
            **GREEDY,
        }
        out = self.client.post("/completion", body)
        new: list[int | None] = [int(p["id"]) for p in out.get("completion_probabilities", [])]
        reasons = {"limit": "length", "word": "stop_string"}
        return new, out["content"], reasons.get(out.get("stop_type"), "stop_token")

    def _next(self, prefix: list[int]) -> dict[int, float]:
        body = {
            "prompt": prefix,
            "n_predict": 1,
            "n_probs": self.top_k,
            "cache_prompt": True,
            "post_sampling_probs": False,
            **GREEDY,
        }
        probs = self.client.post("/completion", body)["completion_probabilities"][0]["top_logprobs"]
        return {int(p["id"]): float(p["logprob"]) for p in probs}

"""llama-cpp-python's server (``python -m llama_cpp.server``), found by its
``/openapi.json`` listing ``/extras/tokenize``: ``/extras/tokenize``,
``/extras/detokenize``, ``/v1/completions`` with ``logprobs``/``echo``.

Sessions (the state stages) are the server's own prefix reuse: the ids a session holds
are kept here, and each ``session_append`` sends them whole as a one-token completion, of
which the server evaluates only what its KV (its last prompt, or with ``--cache`` its RAM
cache) does not already hold; the last position's top-k log-probs are the answer, named
(``impl.named_logprobs``): a candidate named by a text several ids share is left in the
unnamed remainder, as the logits answer leaves it.

It always parses special tokens (``parse_special=False`` is declined when the text
holds ``<``); it answers detokenized text (ids whose bytes are not valid UTF-8 are
declined); it has no chat-template endpoint. It names log-prob candidates by their
text, not their id (a finding about the server: candidates whose texts collide
overwrite each other in its answer): texts are mapped back to ids through the GGUF's
vocabulary, and a text several tokens share (the empty text of every control token,
a piece of a split character) names no id — the answer then says which candidates
went unnamed, and their probability stays an unnamed remainder, never spread over the
vocabulary (``impl.named_logprobs``). With ``echo``, its ``token_logprobs[i]`` and
``top_logprobs[i]`` describe the distribution *after* token i (OpenAI's define them
as the one before it, i.e. predicting token i): the adapter reads them so. It takes prompts as text, so a prompt is spelled from the GGUF's
vocabulary (control tokens written out) and sent only when the server's own
tokenization of that text gives back exactly the ids (else declined). Its
detokenizer (0.3.36) drops every piece longer than 32 bytes, which shows in
``decode`` answers and candidate names — a finding about the server, passed on.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from impl import bounds
from impl.http import vocab
from impl.http.transport import GREEDY, NAME, ClientError, HttpClient
from impl.protocol import EngineError, ModelRef, Unsupported


class LlamaCppPythonServer:
    name = "llama-cpp-python"
    capabilities = frozenset({"encode", "decode", "logits", "generate", "session"})

    def __init__(self, client: HttpClient, top_k: int, served: str | None):
        self.client, self.top_k, self.served = client, top_k, served

    @classmethod
    def probe(cls, client: HttpClient, top_k: int) -> LlamaCppPythonServer | None:
        """The server at ``client``'s URL if it is llama-cpp-python's, else None."""
        try:
            paths = client.get("/openapi.json").get("paths", {})
        except ClientError:
            return None
        if "/extras/tokenize" not in paths:
            return None
        models = client.get("/v1/models").get("data", [])
        return cls(client, top_k, models[0]["id"] if models else None)

    def encode(self, text: str, parse_special: bool) -> list[int]:
        if not parse_special and "<" in text:
            raise Unsupported("llama-cpp-python's /extras/tokenize always parses special tokens")
        return [
            int(t)
            for t in self.client.post(
                "/extras/tokenize", {"input": text}, bounds.answer_items("encode", {"text": text}, None)
            )["tokens"]
        ]

    def decode(self, ids: Sequence[int]) -> bytes:
        try:
            answer = self.client.post("/extras/detokenize", {"tokens": [int(i) for i in ids]})
        except EngineError as exc:
            if "codec can't decode" in str(exc):
                raise Unsupported(
                    "the server answers detokenized text; these ids' bytes are not valid UTF-8 "
                    "and cannot travel"
                ) from None
            raise
        return answer["text"].encode("utf-8")

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        raise Unsupported("llama-cpp-python's server has no chat-template endpoint")

    def logit_rows(
        self, model: ModelRef, ids: list[int], positions: list[int]
    ) -> tuple[list[dict[int, float]], str]:
        """Top-k log-probs after each of ``positions``, and why some candidates have no id
        ("" when every candidate was named). ``echo`` returns every position but the first
        (the OpenAI shape leaves it null), so position 0 is asked on its own."""
        rows: list[dict[int, float]] = []
        unnamed: collections.Counter[str] = collections.Counter()
        if positions and positions[0] == 0:
            first = self.client.post(
                "/v1/completions",
                {
                    "prompt": self._prompt_text(model, ids[:1]),
                    "max_tokens": 1,
                    "logprobs": self.top_k,
                    **GREEDY,
                },
            )
            rows.append(self._by_id(model, first["choices"][0]["logprobs"]["top_logprobs"][0], unnamed))
        if any(i > 0 for i in positions):
            out = self.client.post(
                "/v1/completions",
                {
                    "prompt": self._prompt_text(model, ids),
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": self.top_k,
                    **GREEDY,
                },
            )
            tops = out["choices"][0]["logprobs"]["top_logprobs"]
            rows += [self._by_id(model, tops[i], unnamed) for i in positions if i > 0]
        if not unnamed:
            return rows, ""
        shown = ", ".join(f"{t!r} ×{n}" for t, n in unnamed.most_common(4))
        return rows, (
            f"llama-cpp-python names log-prob candidates by their text, and {sum(unnamed.values())} "
            f"candidates had a text several ids share ({shown}): their probability is left unnamed"
        )

    def last_row(self, model: ModelRef, ids: list[int]) -> tuple[dict[int, float], str]:
        """The top-k log-probs after the prompt's last id (a one-token greedy completion), and
        why some candidates have no id ("" when every one was named). The server's one model
        keeps the KV of its last prompt and evaluates only what follows the longest shared
        prefix (and, started with ``--cache``, restores a longer cached prefix from its RAM
        cache): a session's append is such a request."""
        unnamed: collections.Counter[str] = collections.Counter()
        out = self.client.post(
            "/v1/completions",
            {"prompt": self._prompt_text(model, ids), "max_tokens": 1, "logprobs": self.top_k, **GREEDY},
        )
        choice = out["choices"][0]
        if out.get("usage", {}).get("prompt_tokens", len(ids)) != len(ids):
            raise EngineError(
                f"{NAME}: the completion's prompt was {out['usage']['prompt_tokens']} tokens, not the {len(ids)} sent"
            )
        tops = choice["logprobs"]["top_logprobs"]
        if not tops:
            # The greedy token ended the completion (an end of generation such as <|im_end|>,
            # after "…France?"): the server then reports no token and no log-probs. The echo of
            # the same prompt has them: its entry i is the distribution after id i. The server
            # holds the whole prompt (the end token was never evaluated), so 0.3.36 evaluates
            # nothing again ("full prompt already cached") and answers the row just computed.
            if len(ids) < 2:
                raise EngineError(f"{NAME}: a one-id prompt's completion ended at once, with no log-probs")
            echo = self.client.post(
                "/v1/completions",
                {
                    "prompt": self._prompt_text(model, ids),
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": self.top_k,
                    **GREEDY,
                },
            )
            tops = echo["choices"][0]["logprobs"]["top_logprobs"][len(ids) - 1 :]
        row = self._by_id(model, tops[0], unnamed)
        shown = ", ".join(f"{t!r} ×{n}" for t, n in unnamed.most_common(4))
        return row, (
            f"{sum(unnamed.values())} candidates had a text several ids share ({shown})" if unnamed else ""
        )

    def generate(
        self, model: ModelRef, ids: Sequence[int], max_tokens: int, stop: list[str]
    ) -> tuple[list[int | None], str, str]:
        """Greedy continuation: (new ids, text, finish reason)."""
        prompt = self._prompt_text(model, ids)
        body = {"prompt": prompt, "max_tokens": max_tokens, "stop": stop or None, "logprobs": 1, **GREEDY}
        choice = self.client.post("/v1/completions", body)["choices"][0]
        named = choice["logprobs"]["tokens"]
        new = [vocab.unique_id(model.gguf, t) for t in named]
        if None in new:
            unnamed = [t for t, i in zip(named, new, strict=True) if i is None]
            raise Unsupported(
                f"llama-cpp-python names generated tokens by their text; {len(unnamed)} of them "
                f"({unnamed[:3]!r}: pieces of a split character or texts several tokens share) "
                f"name no single id"
            )
        text = choice["text"]
        if choice["finish_reason"] == "length":
            reason = "length"
        elif any(s and s in _tail(model, new, text) for s in stop):
            reason = "stop_string"
        else:
            reason = "stop_token"
        return new, text, reason

    def _prompt_text(self, model: ModelRef, ids: Sequence[int]) -> str:
        """The text whose server-side tokenization is exactly ``ids`` (or decline).

        Spelled from the GGUF's vocabulary with control tokens written out (the
        server parses them back), not through the server's detokenizer, which
        drops control tokens and, in llama-cpp-python 0.3.36, every piece longer
        than 32 bytes."""
        pieces = vocab.pieces(model.gguf, controls=True)
        if any(not 0 <= i < len(pieces) for i in ids):
            raise Unsupported(f"ids outside the vocabulary of {len(pieces)}")
        try:
            text = b"".join(pieces[i] for i in ids).decode("utf-8")
        except UnicodeDecodeError:
            raise Unsupported(
                "the server takes prompts as text; these ids are not valid UTF-8 text"
            ) from None
        again = [
            int(t)
            for t in self.client.post(
                "/extras/tokenize", {"input": text}, bounds.answer_items("encode", {"text": text}, None)
            )["tokens"]
        ]
        if again != list(ids):
            k = next(
                (j for j, (a, b) in enumerate(zip(ids, again, strict=False)) if a != b),
                min(len(ids), len(again)),
            )
            raise Unsupported(
                f"the server takes prompts as text, and re-tokenizing them changes the ids at index {k} "
                f"({list(ids)[k : k + 3]} -> {again[k : k + 3]})"
            )
        return text

    def _by_id(
        self, model: ModelRef, top: dict[str, float] | None, unnamed: collections.Counter[str]
    ) -> dict[int, float]:
        if top is None:
            raise EngineError(f"{NAME}: the server returned no log-probs for a prompt position")
        # The server adds the current token's own entry to each position's top-k:
        # keep the k most probable, which are the top-k proper.
        best = sorted(top.items(), key=lambda kv: -kv[1])[: self.top_k]
        out = {}
        for text, logprob in best:
            token = vocab.unique_id(model.gguf, text)
            if token is not None:
                out[token] = float(logprob)
            else:
                unnamed[text] += 1
        return out


def _tail(model: ModelRef, ids: list[int | None], text: str) -> str:
    """The generated text plus the text of the tokens the server cut at a stop string."""
    return "".join(vocab.texts(model.gguf)[i] for i in ids if i is not None) if ids else text

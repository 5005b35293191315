"""``--impl 'http:<base url>'``: gate a running inference server through the endpoints
servers in this ecosystem offer.

Two server shapes are recognised by probing the base URL once:

* **llama-cpp-python** (``python -m llama_cpp.server``, found by its
  ``/openapi.json`` listing ``/extras/tokenize``): ``/extras/tokenize``,
  ``/extras/detokenize``, ``/v1/completions`` with ``logprobs``/``echo``.
* **llama.cpp server** (``llama-server``, found by ``/props``): ``/tokenize``,
  ``/detokenize``, ``/apply-template``, ``/completion`` with ``n_probs``.

Capabilities are what the server can answer faithfully:

=============  ==================================  ===================================
capability     llama-cpp-python                     llama.cpp server
=============  ==================================  ===================================
encode         yes (it always parses special        yes (``parse_special`` honoured)
               tokens: ``parse_special=False`` is
               declined when the text holds ``<``)
decode         yes (the server answers text: ids    yes
               whose bytes are not valid UTF-8 are
               declined)
render         no                                   ``/apply-template``
logits         top-k log-probs per position         top-k per position
               (``SPECGATE_HTTP_TOP_K``, default 64)
generate       greedy, ids from the log-prob tokens  greedy
=============  ==================================  ===================================

A server speaks in log-probabilities of its top-k candidates, not logits. The
``logits`` answer is therefore a ``[n, n_vocab]`` array that holds the top-k
log-probabilities exactly and spreads the remaining probability mass evenly over
the other ids: its softmax reproduces the server's top-k probabilities, so top-1
agreement and KL over the top-k are measured exactly; nothing outside the top-k
is claimed. llama-cpp-python names candidates by their text, not their id; texts
are mapped back to ids through the GGUF's vocabulary, and a text several tokens
share (e.g. the empty text of control tokens) cannot be mapped and is dropped.

llama-cpp-python takes prompts as text, so a prompt is spelled from the GGUF's
vocabulary (control tokens written out) and sent only when the server's own
tokenization of that text gives back exactly the ids (else declined). Its
detokenizer (0.3.36) drops every piece longer than 32 bytes, which shows in
``decode`` answers and candidate names — a finding about the server, passed on.

A server serves one model: asking about another is declined (``Unsupported``)
naming the model the server has. Connection failures, HTTP 5xx answers, a request
not answered in full within ``SPECGATE_HTTP_TIMEOUT`` seconds (default 60; the
deadline of the whole request — connecting, sending, headers and body — not of
each socket read, so a server trickling bytes cannot stretch it) and a body larger
than ``SPECGATE_HTTP_MAX_BODY_BYTES`` (default 64 MiB; the largest answer asked
for, a 512-token prompt echoed with 64 log-probs per position, is ~1.5 MB of JSON)
are ``EngineError`` (outcome ``error``). Requests go straight to the server named
(no HTTP proxy): gated servers are local or reachable directly.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from impl.envvars import env_count, env_seconds
from impl.protocol import Engine, EngineError, ModelRef, Unsupported

MAX_BODY_BYTES = 64 * 1024 * 1024
CHUNK = 1 << 16
GREEDY = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}


class HttpEngine(Engine):
    name = "http"

    def __init__(self, base_url: str, timeout: float | None = None, top_k: int | None = None):
        self.base_url = base_url.strip().rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise EngineError(f"http: {base_url!r} is not an http(s) URL; use --impl 'http:http://host:port'")
        self.timeout = timeout if timeout is not None else env_seconds("SPECGATE_HTTP_TIMEOUT", 60.0)
        self.top_k = top_k if top_k is not None else env_count("SPECGATE_HTTP_TOP_K", 64, "candidates")
        self.max_body_bytes = env_count("SPECGATE_HTTP_MAX_BODY_BYTES", MAX_BODY_BYTES)
        self._flavor: str | None = None
        self._served: str | None = None

    # --- transport ------------------------------------------------------------------
    def _http(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request, answered in full within ``self.timeout`` seconds and in at most
        ``self.max_body_bytes`` bytes, as parsed JSON."""
        where = f"{method} {self.base_url}{path}"
        try:
            status, raw = self._exchange(method, path, body)
        except _Overlong as exc:
            raise EngineError(
                f"{self.name}: {where} answered a body larger than {exc.limit} bytes "
                f"(SPECGATE_HTTP_MAX_BODY_BYTES)"
            ) from None
        except _Expired:
            raise EngineError(
                f"{self.name}: {where} was not answered in full within {self.timeout:g} s "
                f"(SPECGATE_HTTP_TIMEOUT, the deadline of the whole request)"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(f"{self.name}: {where} failed: {exc or type(exc).__name__}") from None
        if status >= 400:
            detail = raw[:500].decode("utf-8", errors="replace")
            if status >= 500:
                raise EngineError(f"{self.name}: {method} {path} -> HTTP {status}: {detail}")
            raise _ClientError(status, detail)
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise EngineError(f"{self.name}: {method} {path} answered malformed JSON: {exc}") from None

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, bytes]:
        """Status and body bytes. A timer cuts the connection at the deadline, so the
        whole exchange, however slowly the server answers, ends by then."""
        url = urllib.parse.urlsplit(self.base_url + path)
        target = url.path + (f"?{url.query}" if url.query else "")
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = kind(url.hostname or "", url.port, timeout=self.timeout)
        expired, connected = threading.Event(), []
        timer = threading.Timer(self.timeout, _cut, args=(connected, expired))
        timer.daemon = True
        timer.start()
        try:
            conn.connect()  # bounded by the socket timeout; the cut then covers the rest
            connected.append(conn.sock)  # the connection hands its socket to the response
            if expired.is_set():
                raise _Expired
            data = json.dumps(body).encode("utf-8") if body is not None else None
            conn.request(method, target, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.status, _read_bounded(response, self.max_body_bytes)
        except (OSError, http.client.HTTPException):
            if expired.is_set():
                raise _Expired from None
            raise
        finally:
            timer.cancel()
            conn.close()
        if expired.is_set():  # a body without a length ends where the cut ended it
            raise _Expired
        return answer

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self._http("POST", path, body)
        except _ClientError as exc:
            raise EngineError(f"{self.name}: POST {path} -> HTTP {exc.code}: {exc.detail}") from None

    def _probe(self) -> str:
        if self._flavor is not None:
            return self._flavor
        try:
            paths = self._http("GET", "/openapi.json").get("paths", {})
        except _ClientError:
            paths = {}
        if "/extras/tokenize" in paths:
            self._flavor = "llama-cpp-python"
            models = self._http("GET", "/v1/models").get("data", [])
            self._served = models[0]["id"] if models else None
            return self._flavor
        try:
            props = self._http("GET", "/props")
        except _ClientError as exc:
            raise EngineError(
                f"http: {self.base_url} offers neither llama-cpp-python's /openapi.json nor "
                f"llama.cpp's /props (HTTP {exc.code})"
            ) from None
        self._flavor = "llama.cpp"
        self._served = props.get("model_path")
        return self._flavor

    def _check_model(self, model: ModelRef) -> None:
        self._probe()
        if self._served is None:
            return
        served = Path(self._served)
        if served.name != model.gguf.name and served.resolve() != model.gguf.resolve():
            raise Unsupported(
                f"the server at {self.base_url} serves {self._served}, not {model.id} ({model.gguf}); "
                f"gate it with --model pointing at that file"
            )

    # --- protocol surface --------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[str]:
        flavor = self._probe()
        offered = {"encode", "decode", "logits", "generate"}
        return frozenset(offered | {"render"} if flavor == "llama.cpp" else offered)

    def version(self) -> str:
        return f"{self._probe()} server at {self.base_url}"

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        self._check_model(model)
        if self._flavor == "llama.cpp":
            body = {"content": text, "add_special": False, "parse_special": parse_special}
            return [int(t) for t in self._post("/tokenize", body)["tokens"]]
        if not parse_special and "<" in text:
            raise Unsupported("llama-cpp-python's /extras/tokenize always parses special tokens")
        return [int(t) for t in self._post("/extras/tokenize", {"input": text})["tokens"]]

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        self._check_model(model)
        if self._flavor == "llama.cpp":
            return self._post("/detokenize", {"tokens": [int(i) for i in ids]})["content"].encode("utf-8")
        try:
            return self._post("/extras/detokenize", {"tokens": [int(i) for i in ids]})["text"].encode("utf-8")
        except EngineError as exc:
            if "codec can't decode" in str(exc):
                raise Unsupported(
                    "the server answers detokenized text; these ids' bytes are not valid UTF-8 "
                    "and cannot travel"
                ) from None
            raise

    def render(
        self,
        model: ModelRef,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        self._check_model(model)
        if not add_generation_prompt or kwargs:
            raise Unsupported(
                "/apply-template always adds the generation prompt and takes no template variables"
            )
        return self._post("/apply-template", {"messages": list(messages)})["prompt"]

    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:
        self._check_model(model)
        ids = [int(i) for i in ids]
        n_vocab = len(_vocab_texts(model.gguf))
        if self._flavor == "llama.cpp":
            rows = [self._llamacpp_next(ids[: i + 1]) for i in range(len(ids))]
        else:
            rows = self._python_rows(model, ids)
        return np.stack([_spread(row, n_vocab) for row in rows])

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        self._check_model(model)
        greedy = float(params.get("temperature", 0.8)) < 1e-6 or int(params.get("top_k", 40)) == 1
        if not greedy:
            raise Unsupported("a server's random draws cannot be replayed; only greedy generation is gated")
        max_tokens = int(params.get("max_tokens", 32))
        stop = [s if isinstance(s, str) else bytes(s).decode("utf-8") for s in params.get("stop", [])]
        if self._flavor == "llama.cpp":
            body = {
                "prompt": [int(i) for i in ids],
                "n_predict": max_tokens,
                "stop": stop,
                "n_probs": 1,
                "cache_prompt": True,
                **GREEDY,
            }
            out = self._post("/completion", body)
            new = [int(p["id"]) for p in out.get("completion_probabilities", [])]
            text = out["content"]
            reason = (
                "length"
                if out.get("stop_type") == "limit"
                else ("stop_string" if out.get("stop_type") == "word" else "stop_token")
            )
        else:
            prompt = self._prompt_text(model, ids)
            body = {"prompt": prompt, "max_tokens": max_tokens, "stop": stop or None, "logprobs": 1, **GREEDY}
            choice = self._post("/v1/completions", body)["choices"][0]
            named = choice["logprobs"]["tokens"]
            new = [_unique_id(model.gguf, t) for t in named]
            if None in new:
                unnamed = [t for t, i in zip(named, new, strict=True) if i is None]
                raise Unsupported(
                    f"llama-cpp-python names generated tokens by their text; {len(unnamed)} of them "
                    f"({unnamed[:3]!r}: pieces of a split character or texts several tokens share) "
                    f"name no single id"
                )
            text = choice["text"]
            reason = (
                "length"
                if choice["finish_reason"] == "length"
                else (
                    "stop_string" if any(s and s in _tail(model, new, text) for s in stop) else "stop_token"
                )
            )
        data = text.encode("utf-8")
        return {"ids": new, "bytes": data.hex(), "text": text, "finish_reason": reason}

    # --- llama-cpp-python: prompts travel as text --------------------------------------
    def _prompt_text(self, model: ModelRef, ids: Sequence[int]) -> str:
        """The text whose server-side tokenization is exactly ``ids`` (or decline).

        Spelled from the GGUF's vocabulary with control tokens written out (the
        server parses them back), not through the server's detokenizer, which
        drops control tokens and, in llama-cpp-python 0.3.36, every piece longer
        than 32 bytes."""
        pieces = _vocab_pieces(model.gguf, controls=True)
        if any(not 0 <= i < len(pieces) for i in ids):
            raise Unsupported(f"ids outside the vocabulary of {len(pieces)}")
        try:
            text = b"".join(pieces[i] for i in ids).decode("utf-8")
        except UnicodeDecodeError:
            raise Unsupported(
                "the server takes prompts as text; these ids are not valid UTF-8 text"
            ) from None
        again = [int(t) for t in self._post("/extras/tokenize", {"input": text})["tokens"]]
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

    def _python_rows(self, model: ModelRef, ids: list[int]) -> list[dict[int, float]]:
        """Top-k log-probs after each position. ``echo`` returns every position but the
        first (the OpenAI shape leaves it null), so position 0 is asked on its own."""
        rows: list[dict[int, float]] = []
        first = self._post(
            "/v1/completions",
            {"prompt": self._prompt_text(model, ids[:1]), "max_tokens": 1, "logprobs": self.top_k, **GREEDY},
        )
        rows.append(self._by_id(model, first["choices"][0]["logprobs"]["top_logprobs"][0]))
        if len(ids) > 1:
            out = self._post(
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
            rows += [self._by_id(model, tops[i]) for i in range(1, len(ids))]
        return rows

    def _by_id(self, model: ModelRef, top: dict[str, float] | None) -> dict[int, float]:
        if top is None:
            raise EngineError(f"{self.name}: the server returned no log-probs for a prompt position")
        # The server adds the current token's own entry to each position's top-k:
        # keep the k most probable, which are the top-k proper.
        best = sorted(top.items(), key=lambda kv: -kv[1])[: self.top_k]
        out = {}
        for text, logprob in best:
            token = _unique_id(model.gguf, text)
            if token is not None:
                out[token] = float(logprob)
        return out

    # --- llama.cpp server: prompts travel as ids ---------------------------------------
    def _llamacpp_next(self, prefix: list[int]) -> dict[int, float]:
        body = {
            "prompt": prefix,
            "n_predict": 1,
            "n_probs": self.top_k,
            "cache_prompt": True,
            "post_sampling_probs": False,
            **GREEDY,
        }
        probs = self._post("/completion", body)["completion_probabilities"][0]["top_logprobs"]
        return {int(p["id"]): float(p["logprob"]) for p in probs}


class _Overlong(Exception):
    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


class _Expired(Exception):
    """The whole-request deadline passed."""


def _cut(connected: list[socket.socket], expired: threading.Event) -> None:
    """End a connection at its deadline: a read or write in progress returns at once."""
    expired.set()
    for sock in connected:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _read_bounded(response: http.client.HTTPResponse, limit: int) -> bytes:
    """The body, refused (``_Overlong``) as soon as it is known to exceed ``limit``."""
    declared = response.getheader("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _Overlong(limit)
    parts, size = [], 0
    while chunk := response.read(min(CHUNK, limit + 1 - size)):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _Overlong(limit)
    return b"".join(parts)


class _ClientError(Exception):
    def __init__(self, code: int, detail: str):
        super().__init__(code, detail)
        self.code, self.detail = code, detail


def _spread(top: dict[int, float], n_vocab: int) -> np.ndarray:
    """A log-prob row holding ``top`` exactly; the rest of the mass spread evenly."""
    mass = sum(math.exp(v) for v in top.values())
    rest = max(1.0 - mass, 1e-30) / max(n_vocab - len(top), 1)
    row = np.full(n_vocab, math.log(rest), dtype=np.float32)
    for token, logprob in top.items():
        row[token] = logprob
    return row


@lru_cache(maxsize=4)
def _vocab_pieces(gguf_path: Path, controls: bool = False) -> list[bytes]:
    """Each id's bytes as llama.cpp renders it: control tokens empty, or with
    ``controls`` their own text."""
    from oracle.byte_level import from_standin
    from oracle.gguf import open_gguf

    meta = open_gguf(gguf_path, header_only=True).metadata
    tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type")
    out = []
    for i, tok in enumerate(tokens):
        kind = int(types[i]) if types is not None else 1
        if kind == 3:
            out.append(tok.encode("utf-8") if controls else b"")
        else:
            out.append(tok.encode("utf-8") if kind == 4 else from_standin(tok))
    return out


def _vocab_texts(gguf_path: Path) -> list[str]:
    """Each id's text as llama-cpp-python names it: its piece decoded, errors ignored."""
    return [p.decode("utf-8", errors="ignore") for p in _vocab_pieces(gguf_path)]


@lru_cache(maxsize=4)
def _text_index(gguf_path: Path) -> dict[str, int | None]:
    """Text -> id, for texts exactly one id produces. A text several ids share (all
    control tokens read as ""; ``b" \\xe8"`` reads as " " like the space token) is
    ``None``: the server keeps one value under it, and which id it belongs to is lost."""
    index: dict[str, int | None] = {}
    for i, text in enumerate(_vocab_texts(gguf_path)):
        index[text] = None if text in index else i
    return index


def _unique_id(gguf_path: Path, text: str) -> int | None:
    return _text_index(gguf_path).get(text)


def _tail(model: ModelRef, ids: list[int | None], text: str) -> str:
    """The generated text plus the text of the tokens the server cut at a stop string."""
    return "".join(_vocab_texts(model.gguf)[i] for i in ids if i is not None) if ids else text

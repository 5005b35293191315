"""A tokenizer engine written from PROTOCOL.md alone: HF `tokenizers` on the model's
own `tokenizer.json` (models that ship one), serving `split`, `encode` and `decode`.
Imports nothing from specgate.

    python tests/engines/contract/tokenizer_engine.py

What PROTOCOL.md section 4.2 asks, and how this engine does it:
- no BOS: `encode(..., add_special_tokens=False)`;
- no Unicode normalization: the `normalizer` of tokenizer.json (NFC for Qwen) is removed;
- `parse_special` false leaves control tokens as text but still matches user-defined
  ones: HF's `encode_special_tokens` does exactly that to added tokens marked
  `special` while the others are still matched — so each added token's `special` is
  set from the GGUF's `tokenizer.ggml.token_type` (3, control: special), read with
  gguf-py (Qwen's tokenizer.json marks the FIM tokens, control in the GGUF, not special);
- `split`: the tokenizer.json's own `Split` pre-tokenizer step, without the
  byte-level step, so the pieces are text;
- `decode`: the pieces concatenated — byte-level stand-in characters back to bytes,
  added tokens as their text, ids outside the vocabulary skipped.
"""

from __future__ import annotations

import base64
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jsonl import Refusal, serve
from tokenizers import Regex, Tokenizer
from tokenizers.pre_tokenizers import Split


def byte_standins() -> dict[str, int]:
    """GPT-2 byte-level stand-ins: printable bytes stand for themselves, the other
    bytes take the code points from 256 upwards, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    standins, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            standins[chr(byte)] = byte
        else:
            standins[chr(256 + extra)] = byte
            extra += 1
    return standins


STANDINS = byte_standins()


CONTROL = 3  # tokenizer.ggml.token_type of a control token


def control_ids(gguf_path: str) -> set[int]:
    from gguf import GGUFReader

    types = GGUFReader(gguf_path).fields["tokenizer.ggml.token_type"].contents()
    return {i for i, kind in enumerate(types) if kind == CONTROL}


class ModelTokenizer:
    def __init__(self, tokenizer_json: Path, gguf_path: str) -> None:
        config = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        config["normalizer"] = None  # no Unicode normalization (section 4.2)
        control = control_ids(gguf_path)
        for token in config.get("added_tokens", []):  # the GGUF's token types decide (section 4.2)
            token["special"] = token["id"] in control
        self.tokenizer = Tokenizer.from_str(json.dumps(config))
        self.added = {t["id"]: t["content"] for t in config.get("added_tokens", [])}
        self.splitter = self._splitter(config.get("pre_tokenizer"))

    @staticmethod
    def _splitter(pre: dict[str, Any] | None) -> Split:
        steps = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre]
        for step in steps:
            if step and step.get("type") == "Split" and "Regex" in step.get("pattern", {}):
                behavior = step.get("behavior", "Isolated").lower()
                return Split(Regex(step["pattern"]["Regex"]), behavior, invert=step.get("invert", False))
        raise Refusal("tokenizer.json has no regex Split pre-tokenizer")

    def split(self, text: str) -> list[str]:
        return [piece for piece, _ in self.splitter.pre_tokenize_str(text)]

    def encode(self, text: str, parse_special: bool) -> list[int]:
        self.tokenizer.encode_special_tokens = not parse_special
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> bytes:
        out = bytearray()
        for i in ids:
            if i in self.added:
                out += self.added[i].encode("utf-8")
                continue
            token = self.tokenizer.id_to_token(i)
            if token is None:
                continue  # outside the vocabulary
            for ch in token:
                out += bytes([STANDINS[ch]]) if ch in STANDINS else ch.encode("utf-8")
        return bytes(out)


@cache
def model_tokenizer(path: str, gguf_path: str) -> ModelTokenizer:
    return ModelTokenizer(Path(path), gguf_path)


def tokenizer_of(request: dict[str, Any]) -> ModelTokenizer:
    path = request["model"].get("tokenizer_json")
    if not path:
        raise Refusal("this engine loads tokenizer.json; the model ships none")
    return model_tokenizer(path, request["model"]["gguf"])


HANDLERS = {
    "split": lambda req: tokenizer_of(req).split(req["text"]),
    "encode": lambda req: tokenizer_of(req).encode(req["text"], req["parse_special"]),
    "decode": lambda req: {"$bytes": base64.b64encode(tokenizer_of(req).decode(req["ids"])).decode("ascii")},
}

if __name__ == "__main__":
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "contract-tokenizer",
        "version": "0.1",
        "capabilities": ["split", "encode", "decode"],
    }
    sys.exit(serve(hello, HANDLERS))

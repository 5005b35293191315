"""The oracle's conversation mode on a real model: what each turn costs.

A conversation of ``--turns`` user/assistant exchanges grows to about ``--tokens``
tokens (the model's own template, the oracle's tokenizer). Each turn syncs the
session to the whole new render (``oracle.conversation``): the tokens it evaluates
are the turn's delta, not the whole conversation again. Printed per turn: the
prompt's length, the tokens kept / dropped / evaluated, the seconds; then the sum
against re-prefilling every turn's whole prompt, and the final turn's logits
against a fresh one-shot prefill of the final render (max |Δlogit|).

    python benchmarks/bench_conversation.py [--model qwen2.5-coder-0.5b-instruct] [--tokens 2048] [--turns 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from oracle.conversation import Conversation
from oracle.forward import Model
from oracle.gguf import open_gguf
from oracle.session import Session
from oracle.template import chat_template_for
from oracle.tokenizer import Tokenizer
from specgate.supply.models import model_ref

WORDS = ["the", "model", "keeps", "keys", "and", "values", "of", "every", "token", "it", "has", "seen",
         "so", "a", "new", "turn", "costs", "only", "what", "adds", "über", "café", "naïve", "東京",
         "München", "你好", "Привет", "مرحبا", "\n"]  # fmt: skip


def text(rng: np.random.Generator, n_words: int) -> str:
    return " ".join(rng.choice(WORDS, n_words))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--turns", type=int, default=8)
    args = parser.parse_args()
    ref = model_ref(args.model)
    tok = Tokenizer.from_gguf(ref.gguf)
    template = chat_template_for(open_gguf(ref.gguf, header_only=True).metadata, ref.tokenizer_config)
    model = Model.from_gguf(ref.gguf)
    session = Session(model)
    conv = Conversation(session, template, lambda t: tok.encode(t, True))
    rng = np.random.default_rng(0)
    # words per message so that the conversation reaches about --tokens (≈ 1.3 tokens a word here)
    per_message = max(4, int(args.tokens / (2 * args.turns) / 1.3))
    rows, whole = [], 0
    for i in range(args.turns):
        append = [{"role": "user", "content": text(rng, per_message)}]
        if i:
            append.insert(0, {"role": "assistant", "content": text(rng, per_message)})
        t = time.perf_counter()
        turn = conv.turn(append)
        seconds = time.perf_counter() - t
        whole += len(turn.increment.ids)
        rows.append({"turn": i + 1, "prompt": len(turn.increment.ids), "kept": turn.kept,
                     "dropped": turn.dropped, "evaluated": turn.appended, "seconds": round(seconds, 2)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    last = turn.logits.copy()
    session.reset()
    t = time.perf_counter()
    fresh = model.prefill(turn.increment.ids, outputs=[-1])[-1]
    fresh_seconds = time.perf_counter() - t
    summary = {
        "model": args.model,
        "final_tokens": len(turn.increment.ids),
        "evaluated_incremental": sum(r["evaluated"] for r in rows),
        "evaluated_reprefill_every_turn": whole,
        "seconds_incremental": round(sum(r["seconds"] for r in rows), 2),
        "seconds_one_fresh_prefill_of_the_final_prompt": round(fresh_seconds, 2),
        "final_max_abs_dlogit_vs_fresh": float(np.abs(last - fresh).max()),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

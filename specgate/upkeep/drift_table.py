"""The drift table: will append-only KV reuse stay correct with this model's template?

Every multi-turn conversation of the corpus (``corpus/conversations/multi_turn``) is
played turn by turn through the oracle's conversation mode without a model
(``oracle.conversation.Conversation`` dry run) for each model whose template specgate
renders (``corpus.TEMPLATE_MODELS``). Per turn the oracle finds:

* **drift** — the new render (``add_generation_prompt=true``) does not start with the
  past render (``false``): the template re-renders history differently; where
  (character offset, token index) and both texts;
* **seam** — no drift, but the past's tokens joined with the delta's tokens differ
  from the whole render's tokens (BPE merges across the boundary);
* **stale** — the cache of the previous turn (that turn's prompt, with the generation
  prompt) is not a prefix of the new prompt's tokens: an engine that only appends
  keeps that many stale KV tokens.

The renders are checked against transformers' ``apply_chat_template``: they are
recorded with provenance into ``snapshots/<model>/conversation.json`` (``--record``,
needs transformers), the fast tier checks that the oracle renders every turn exactly
as recorded and that ``docs/drift-table.md`` is what this module writes, and the live
tier (``tests/references/test_conversation.py``) re-renders with transformers.

    python -m specgate.upkeep.drift_table                  # write docs/drift-table.md
    python -m specgate.upkeep.drift_table --check          # exit 1 when it is stale
    python -m specgate.upkeep.drift_table --model M --conversation C   # one row, turn by turn
    python -m specgate.upkeep.drift_table --record         # re-record the reference renders
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT
from impl.protocol import ModelRef
from oracle.conversation import Conversation, Turn, asks, next_state, render
from oracle.gguf import open_gguf
from oracle.template import ChatTemplate, chat_template_for
from oracle.tokenizer import Tokenizer
from specgate.upkeep import corpus, snapshots

STAGE = "conversation"  # snapshots/<model>/conversation.json
DOC = DATA_ROOT / "docs" / "drift-table.md"
COMMAND = "python -m specgate.upkeep.drift_table"
HF_WHAT = (
    "transformers apply_chat_template(tokenize=False) with the model's own template: per turn the past "
    "state with add_generation_prompt=False and the new state with True"
)


@cache
def oracle_side(model_id: str) -> tuple[ChatTemplate, Callable[[str], list[int]]]:
    """The model's template and tokenizer (special tokens parsed), as the oracle reads them."""
    from specgate.supply.models import model_ref

    model = model_ref(model_id)
    template = chat_template_for(open_gguf(model.gguf, header_only=True).metadata, model.tokenizer_config)
    tokenizer = Tokenizer.from_gguf(model.gguf)
    return template, lambda text: tokenizer.encode(text, True)


def play(
    template: ChatTemplate, tokenize: Callable[[str], list[int]], conversation: dict[str, Any]
) -> list[Turn]:
    """The conversation's turns through the oracle's conversation mode (dry run: no model)."""
    conv = Conversation(None, template, tokenize, **conversation.get("kwargs", {}))
    return [
        conv.turn(t.get("append", ()), t.get("system"), **t.get("kwargs", {})) for t in conversation["turns"]
    ]


def states(conversation: dict[str, Any]) -> Iterator[tuple[tuple[list, dict], tuple[list, dict]]]:
    """Per turn: ((past messages, past kwargs), (new messages, new kwargs))."""
    messages: list[dict[str, Any]] = []
    kwargs = dict(conversation.get("kwargs", {}))
    for t in conversation["turns"]:
        new = next_state(messages, kwargs, t.get("append", ()), t.get("system"), t.get("kwargs"))
        yield (messages, kwargs), new
        messages, kwargs = new


def renders_by(
    render_one: Callable[[list, bool, dict], str], conversation: dict[str, Any]
) -> list[dict[str, str]]:
    """Per turn ``{"past", "new"}`` as ``render_one(messages, add_generation_prompt, kwargs)`` renders
    them (a state with the generation prompt when it ``asks`` for an answer)."""
    return [
        {"past": render_one(pm, asks(pm), pk) if pm else "", "new": render_one(nm, asks(nm), nk)}
        for (pm, pk), (nm, nk) in states(conversation)
    ]


def oracle_renders(model_id: str, conversation: dict[str, Any]) -> list[dict[str, str]]:
    template, _ = oracle_side(model_id)
    return renders_by(lambda m, g, k: render(template, m, g, k), conversation)


# ---------------------------------------------------------------------------
# the reference (transformers)


def hf_renders(render_one: Callable[[list, bool, dict], str], conversation: dict[str, Any]) -> dict[str, Any]:
    """The reference's renders of every turn (``render_one(messages, add_generation_prompt,
    kwargs)`` through transformers' ``apply_chat_template``), or the template's refusal."""
    from impl.hf import render as hf_render
    from impl.protocol import Unsupported

    try:
        return {"turns": renders_by(render_one, conversation)}
    except Unsupported as exc:
        return {"error": hf_render.template_error(exc)}


def hf_tokenizer_of(model: ModelRef) -> Any:
    from impl.hf import render as hf_render
    from impl.hf import tokenizer as hf_tok

    return hf_render.load(model, lambda: hf_tok.from_gguf(model))


def reference_cases(model: ModelRef, hf: Any = None) -> dict[str, Any]:
    """Every multi-turn conversation's reference renders: through ``hf`` (a live ``hf``
    reference adapter, whose loaded tokenizer a test session shares) when given, else
    through a transformers tokenizer built here from the GGUF (~20 s a model)."""
    if hf is not None:
        render_one = lambda m, g, k: hf.render(model, m, g, **k)  # noqa: E731
    else:
        from impl.hf import render as hf_render

        tok = hf_tokenizer_of(model)
        render_one = lambda m, g, k: hf_render.render(tok, m, g, **k)  # noqa: E731
    return {
        cid: {"conversation": c, **hf_renders(render_one, c)}
        for cid, c in corpus.multi_turn_conversations().items()
    }


def record(model: ModelRef, root: Path = snapshots.SNAPSHOT_ROOT) -> Path:
    data = {
        "provenance": snapshots.provenance(model, {"hf": HF_WHAT}, ("transformers", "jinja2")),
        "cases": reference_cases(model),
    }
    data["provenance"]["command"] = f"{COMMAND} --record"
    return snapshots.write(model, STAGE, data, root)


# ---------------------------------------------------------------------------
# the table


def cell(items: list[str]) -> str:
    return "; ".join(items) if items else "—"


def code(text: str) -> str:
    """A text in a Markdown table cell: its repr (newlines visible), pipes escaped."""
    return "`" + repr(text)[1:-1].replace("|", "\\|").replace("`", "'") + "`"


def summary(turns: list[Turn]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"drift": [], "seam": [], "stale": []}
    for t in turns:
        if (d := t.increment.drift) is not None:
            out["drift"].append(
                f"turn {d.turn} @ {d.offset} (token {d.token}): {code(d.past)} → {code(d.new)}"
            )
        if (s := t.increment.seam) is not None:
            out["seam"].append(f"turn {s.turn} @ token {s.token}: {s.alone} vs {s.whole}")
        if (st := t.stale) is not None:
            where = f"@ {st.offset}" if st.offset is not None else "at a seam"
            out["stale"].append(f"turn {st.turn}: {st.dropped} token(s) from token {st.token} {where}")
    return out


def verdict(s: dict[str, list[str]]) -> str:
    if not (s["drift"] or s["seam"] or s["stale"]):
        return "yes"
    return "no — drop stale KV" if s["stale"] else "yes (drift without stale KV)"


def model_table(model_id: str) -> list[str]:
    template, tokenize = oracle_side(model_id)
    lines = [
        f"## {model_id}",
        "",
        f"Template sha256 `{template.sha256[:16]}…` ({template.origin}).",
        "",
        "| conversation | shape | turns | append-only reuse correct? | template drift (past render → new render) "
        "| seam | stale KV an append-only engine keeps |",
        "|---|---|---|---|---|---|---|",
    ]
    correct = 0
    for cid, conv in corpus.multi_turn_conversations().items():
        s = summary(play(template, tokenize, conv))
        correct += verdict(s).startswith("yes")
        lines.append(
            f"| {cid} | {conv['shape']} | {len(conv['turns'])} | {verdict(s)} | {cell(s['drift'])} "
            f"| {cell(s['seam'])} | {cell(s['stale'])} |"
        )
    total = len(corpus.multi_turn_conversations())
    lines.insert(4, f"Append-only KV reuse stays correct in {correct} of {total} conversations.\n")
    return [*lines, ""]


HEADER = f"""# The drift table: will append-only KV reuse stay correct with this model?

Generated by `{COMMAND}` — do not edit by hand (`{COMMAND} --check` fails when it is
stale). Each row is one conversation of `corpus/conversations/multi_turn/` played turn by
turn through the oracle's conversation mode (`oracle/conversation.py`) with the model's own
template and tokenizer; `{COMMAND} --model MODEL --conversation ID` reproduces one row turn by
turn. Every render the table is computed from equals transformers' `apply_chat_template`
render recorded in `snapshots/<model>/{STAGE}.json` (checked in the fast tier by
`tests/oracle/test_conversation_corpus.py`, re-rendered with transformers in the live tier by
`tests/references/test_conversation.py`).

Each state of the conversation is rendered with the generation prompt exactly when it asks
for an answer (its last message is not the assistant's): the past — the history up to the
assistant's reply — with `add_generation_prompt=false` and the new state with `true`, as
minfer's `format_single` does; a turn that only records the engine's reply (the `*_reply_turns`
conversations) renders the question before it with its generation prompt, which is what the
engine's cache holds, and the reply without one. Columns, per turn:

* **template drift** — the new render does not start with the past render (the incremental
  renderer's delta does not exist): at which turn, character offset and token, and both
  texts there;
* **seam** — no drift, but the past's tokens followed by the delta tokenized alone differ
  from the whole render tokenized (a BPE merge across the boundary): the first differing
  token, and the tokens each way from there (the whole render's are the right ones);
* **stale KV** — the past render's tokens (what the cache holds) are not a prefix of the new
  render's: an engine that only appends keeps that many stale KV tokens. The correct engine
  drops the KV from the first differing token and prefills from there
  (`oracle.session.Session.sync`).

**append-only reuse correct?** is *yes* only when no turn leaves stale KV. The cache here
holds the template's own render of each reply; an engine whose reply was generated
differently from how the template renders it in history must compare its own tokens the
same way.
"""


def document() -> str:
    lines = [HEADER]
    for model_id in corpus.TEMPLATE_MODELS:
        lines += model_table(model_id)
    return "\n".join(lines).rstrip("\n") + "\n"


def detail(model_id: str, conversation_id: str) -> str:
    template, tokenize = oracle_side(model_id)
    conv = corpus.multi_turn_conversations()[conversation_id]
    out = []
    for t in play(template, tokenize, conv):
        out.append(
            f"turn {t.increment.turn}: {t.n_tokens} tokens; kept {t.kept}, dropped {t.dropped}, appended {t.appended}"
        )
        for what in (t.increment.drift, t.increment.seam, t.stale):
            if what is not None:
                out.append(f"  {what}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/drift-table.md is stale")
    parser.add_argument(
        "--record", action="store_true", help="re-record the transformers renders (snapshots)"
    )
    parser.add_argument("--model", choices=corpus.TEMPLATE_MODELS)
    parser.add_argument("--conversation", choices=sorted(corpus.multi_turn_conversations()))
    args = parser.parse_args(argv)
    if args.record:
        from specgate.supply.models import model_ref

        for model_id in [args.model] if args.model else corpus.TEMPLATE_MODELS:
            print(record(model_ref(model_id)))
        return 0
    if args.model and args.conversation:
        print(detail(args.model, args.conversation))
        return 0
    text = document()
    if args.check:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC.name} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())

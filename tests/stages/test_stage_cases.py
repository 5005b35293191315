"""How a stage's cases are built from the references (``Stage.build``,
``specgate/stages/<family>_cases.py``): the rules the recorders used to keep in
``tests/references``, pinned on small inputs whose answers are worked out by hand
here. The ones that need llama.cpp's samplers or a vocabulary are live."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from specgate import stages
from specgate.plugin import model_missing, setup_missing
from specgate.stages import forward_cases, generate_cases, metadata, sample_cases, tokenizer_cases
from specgate.supply import models as model_cache

GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0, "max_tokens": 8}


def test_every_stage_names_its_case_builder() -> None:
    """A stage is one object: each one says how its cases are built."""
    assert all(callable(s.build) for s in stages.STAGES.values())
    assert stages.STAGES["encode"].build is tokenizer_cases.encode_cases
    assert stages.STAGES["generate"].build is generate_cases.generate_cases


# --- generate: stop strings with known answers -------------------------------------------


def test_a_straddling_stop_is_the_first_boundary_with_two_ascii_bytes_each_side() -> None:
    # "a|bcd": one byte on the left; "bcd|ef": cd + ef
    assert generate_cases.straddle_stop([b"a", b"bcd", b"ef", b"gh"]) == b"cdef"
    # the boundary "x\xc3\xa9|yz" has a non-ASCII byte on its left: the next one is taken
    assert generate_cases.straddle_stop([b"x\xc3\xa9", b"yz", b"uv"]) == b"yzuv"
    assert generate_cases.straddle_stop([b"\xc3\xa9", b"\xc3\xa9"]) is None
    assert generate_cases.straddle_stop([b"abc"]) is None


def test_a_stop_after_a_split_character_is_the_next_character_not_seen_before() -> None:
    # "é" (c3 a9) is split over two tokens; the next character "y" first occurs there
    assert generate_cases.stop_after_split_character([b"x\xc3", b"\xa9yz"]) == b"y"
    # "y" occurs before the split: the stop would fire early, so "z" is taken
    assert generate_cases.stop_after_split_character([b"yx\xc3", b"\xa9yz"]) == b"z"
    # no character spans a token boundary
    assert generate_cases.stop_after_split_character([b"ab", b"\xc3\xa9", b"cd"]) is None


def test_a_stop_case_cuts_where_the_stop_starts_and_counts_the_tokens_that_complete_it() -> None:
    # "ab|cd|ef|gh", stop "de": it starts at byte 3 and ends inside the third token
    case = generate_cases.stop_case([7, 8], [b"ab", b"cd", b"ef", b"gh"], b"de", [0.5, 0.4, 0.3, 0.2], GREEDY)
    assert case["prompt"] == [7, 8]
    assert case["params"] == {**GREEDY, "max_tokens": 3, "stop": ["de"]}
    assert case["expected"] == {"bytes": b"abc".hex(), "finish_reason": "stop_string", "n_ids": 3}
    assert case["reference"] == {"ids": None, "margins": [0.5, 0.4, 0.3]}


def stream(ids: list[int], margins: list[float], finish: str = "length") -> dict:
    return {"ids": ids, "finish_reason": finish, "margins": margins}


def test_references_agree_up_to_where_they_part_and_a_clear_parting_is_a_disagreement() -> None:
    same = generate_cases.agreed_prefix(
        {"a": stream([1, 2, 3], [1, 1, 1]), "b": stream([1, 2, 3], [1, 1, 1])}, 0.1
    )
    assert same == ([1, 2, 3], None)
    # they part at step 2 at a near tie (margin 0.05 <= 0.1): the prefix, no disagreement
    tie = {"a": stream([1, 2, 3], [1, 1, 0.05]), "b": stream([1, 2, 4], [1, 1, 0.07])}
    assert generate_cases.agreed_prefix(tie, 0.1) == ([1, 2], None)
    # at step 1 with margin 0.5 on both sides: a disagreement naming the step and the margin
    clear = {"a": stream([1, 2, 3], [1, 0.5, 1]), "b": stream([1, 5, 3], [1, 0.9, 1])}
    ids, reason = generate_cases.agreed_prefix(clear, 0.1)
    assert ids == [1]
    assert reason is not None and reason.startswith(
        "a and b greedy streams part at step 1 with top-2 margin 0.5000"
    )
    # same ids, another finish reason: they part at the end
    ended = {"a": stream([1, 2], [1, 1], "stop_token"), "b": stream([1, 2], [1, 1], "length")}
    assert generate_cases.agreed_prefix(ended, 0.1)[1] is not None


def test_the_generate_cases_of_a_prompt() -> None:
    pieces = {1: b"He", 2: b"llo", 3: b" w", 4: b"orld"}
    greedy = {"llamacpp": {"p": stream([1, 2, 3, 4], [2.0, 1.5, 1.0, 0.5])}}
    greedy["transformers"] = {"p": stream([1, 2, 3, 4], [2.5, 1.0, 1.2, 0.7])}
    cases = generate_cases.generate_cases(
        {"p": [9]}, greedy, lambda ids: b"".join(pieces[i] for i in ids), GREEDY, 0.1, ["straddle"]
    )
    assert set(cases) == {"greedy/p", "stop-straddle/p"}
    assert cases["greedy/p"]["references"] == {
        "llamacpp": greedy["llamacpp"]["p"],
        "transformers": greedy["transformers"]["p"],
    }
    assert "disagreement" not in cases["greedy/p"]
    stop = cases["stop-straddle/p"]
    # "He|llo": "He" + "ll" = "Hell"; cut at 0, completed by the second token
    assert stop["params"]["stop"] == ["Hell"]
    assert stop["expected"] == {"bytes": "", "finish_reason": "stop_string", "n_ids": 2}
    # the smaller margin of the two references at each step, the agreed ids
    assert stop["reference"] == {"ids": [1, 2], "margins": [2.0, 1.0]}


# --- sample: windows, grid points, crafted vectors ---------------------------------------


def test_compact_keeps_the_highest_logits_in_id_order_lower_ids_first_at_a_tie() -> None:
    x = np.array([1.0, 5.0, -np.inf, 5.0, 3.0], dtype=np.float32)
    assert sample_cases.compact(x, 2) == {"n_vocab": 5, "ids": [1, 3], "values": [5.0, 5.0]}
    assert sample_cases.compact(x, 3)["ids"] == [1, 3, 4]
    assert sample_cases.compact(np.array([2.0, 2.0, 2.0]), 1)["ids"] == [0]
    # in id order, not rank order
    assert sample_cases.compact(np.array([1.0, 2.0, 5.0]), 2) == {
        "n_vocab": 3,
        "ids": [1, 2],
        "values": [2.0, 5.0],
    }


def test_a_penalty_window_names_tokens_by_rank_outside_the_window_and_past_the_vocabulary() -> None:
    logits = np.array([1.0, 3.0, -np.inf, 2.0])
    assert sample_cases.penalty_window([0, 1, "out", "oov"], logits) == [1, 3, 2, 11]


def test_grid_points_and_crafted_vectors() -> None:
    grid = {
        "points": {"a": {"top_k": 2, "r": 0.25, "penalty_window": "top"}, "b": {"temperature": 0.0}},
        "penalty_windows": {"none": [], "top": [0, 0]},
    }
    logits = {"n_vocab": 4, "ids": [0, 1, 3], "values": [1.0, 3.0, 2.0]}
    assert sample_cases.grid_cases("w", logits, grid) == {
        "w/a": (logits, {"top_k": 2, "window": [1, 1]}, 0.25),
        "w/b": (logits, {"temperature": 0.0, "window": []}, 0.5),
    }
    windows = {"crafted": {"c": {"logits": [1.0, -math.inf, 2.0], "points": {"p": {"top_k": 1, "r": 0.9}}}}}
    assert sample_cases.crafted_cases(windows) == {
        "crafted-c/p": ({"n_vocab": 3, "ids": [0, 2], "values": [1.0, 2.0]}, {"top_k": 1, "window": []}, 0.9)
    }


@pytest.mark.live
def test_a_top_k_cut_inside_a_tie_records_the_documented_rules_answer() -> None:
    """Logits 3, 2, 2, 2, 1 with top-k 2: llama.cpp keeps two of the three tied 2s; the
    documented top-k keeps all four tokens at or above the second logit."""
    if importlib.util.find_spec("llama_cpp") is None:  # a setup error (fails under --live-references)
        setup_missing("llama-cpp-python: pip install 'specgate[llamacpp]' (nox -s live installs it)")
    logits = {"n_vocab": 5, "ids": [0, 1, 2, 3, 4], "values": [3.0, 2.0, 2.0, 2.0, 1.0]}
    params = {"top_k": 2, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0, "window": []}
    case = sample_cases.reference_case(logits, params, 0.5)
    assert "tie" in case["disagreement"]
    wide = case["sources"]["documented-top-k"]
    # softmax over 3, 2, 2, 2: e / (e + 3) for id 0, 1 / (e + 3) for each tied id
    assert wide["final"]["n"] == 4
    assert [i for i, _ in wide["final"]["top"]] == [0, 1, 2, 3]
    assert wide["final"]["top"][0][1] == pytest.approx(math.e / (math.e + 3), abs=1e-6)
    # cumulative 0.475, 0.650, ...: r = 0.5 falls in id 1's share, 0.025 from a boundary
    assert wide["token"] == 1
    plain = sample_cases.reference_case(logits, {**params, "top_k": 1}, 0.5)
    assert "disagreement" not in plain and plain["token"] == 0


# --- metadata: fields and their agreement --------------------------------------------------


def test_metadata_fields_and_their_disagreements() -> None:
    reading = {"architecture": "qwen2", "hparams": {"n_layer": 2, "rope": None}, "special": {"bos": 1}}
    assert metadata.flatten(reading) == {"architecture": "qwen2", "hparams.n_layer": 2, "special.bos": 1}
    cases = metadata.metadata_cases(
        {"llamacpp": {"hparams": {"a": 1, "b": 2}}, "transformers": {"hparams": {"a": 1, "b": 3, "c": 4}}}
    )
    assert list(cases) == ["hparams.a", "hparams.b", "hparams.c"]
    assert cases["hparams.a"] == {"value": 1, "sources": {"llamacpp": 1, "transformers": 1}}
    assert cases["hparams.b"]["value"] == 2  # the first reference named
    assert (
        cases["hparams.b"]["disagreement"] == "references disagree on hparams.b: llamacpp=2, transformers=3"
    )
    assert cases["hparams.c"] == {"value": 4, "sources": {"transformers": 4}}


# --- trace: the columns kept -----------------------------------------------------------------


def test_a_trace_case_keeps_the_union_of_both_references_top_columns() -> None:
    hf = np.array([[0.0, 5.0, 1.0, 9.0], [3.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    assert forward_cases.top_columns(hf, 1) == {3, 0}
    llama = np.array([[9.0, 0.0, 1.0, 5.0], [0.0, 0.0, 4.0, 0.0]], dtype=np.float32)
    assert forward_cases.top_columns(llama, 1) == {0, 2}
    kept = forward_cases.record_form({"result_output": hf, "l_out-0": hf}, [0, 2], "float16")
    from impl.process import wire

    assert np.array_equal(wire.decode_value(kept["result_output"]), hf[:, [0, 2]])
    assert wire.decode_value(kept["l_out-0"]).shape == (2, 4)
    assert wire.decode_value(kept["l_out-0"]).dtype == np.float16


# --- tokenizer: on a real vocabulary ------------------------------------------------------------


@pytest.fixture
def vocab(specgate, reference):
    # Not cached: a setup error naming the command that fetches it (a failure under
    # --live-references, which both tiers pass), never a silent skip.
    if "qwen3-vocab" not in model_cache.cached_models():
        model_missing("qwen3-vocab; run: specgate models fetch")
    llama = reference("llamacpp")
    model = specgate.model("qwen3-vocab")
    return llama, model, llama.llama(model, vocab_only=True)


@pytest.mark.live
def test_stretches_between_special_tokens(vocab) -> None:
    llama, model, llm = vocab
    a, b = llama.encode(model, "a", False), llama.encode(model, "b c", False)
    [start] = llama.encode(model, "<|im_start|>", True)
    ids = llama.encode(model, "a<|im_start|>b c<|im_start|>", True)
    assert ids == [*a, start, *b, start]
    assert tokenizer_cases.special_stretches(llm, ids) == [a, b, []]


@pytest.mark.live
def test_decode_corpus_ids_at_the_vocabularys_edge_and_beyond(vocab) -> None:
    llama, model, llm = vocab
    n = llm.n_vocab()
    text = llama.encode(model, "hi", False)
    parts = [{"text": "hi"}, {"id": "last"}, {"id": "n_vocab+1"}]
    ids = tokenizer_cases.composed_ids(llm, parts)
    assert ids == [*text, n - 1, n + 1]
    case = tokenizer_cases.beyond_vocabulary(llama, llm, model, ids, {})
    assert case["hex"] == llama.decode(model, [*text, n - 1]).hex()
    assert f"ids [{n + 1}] lie outside the {n}-token vocabulary" in case["note"]
    assert tokenizer_cases.composed_ids(llm, [{"special": "not a special token"}]) is None


@pytest.mark.live
def test_decode_cases_refuse_an_encoding_that_does_not_round_trip(vocab) -> None:
    llama, model, _ = vocab
    encoded = {
        "x/special": {"text": "hello", "parse_special": True, "ids": llama.encode(model, "help", True)}
    }
    with pytest.raises(ValueError, match="does not round-trip"):
        tokenizer_cases.decode_cases(llama, model, encoded, {})

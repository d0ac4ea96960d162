"""cpplan's ART packer on its own (no ART needed): the rows read every result back under ART's mask
rule, follow ART's padding and id conventions, are deterministic, are sized by the per-rank floors,
and bad input is refused or reported."""

from __future__ import annotations

import inspect
import logging

import numpy as np
import pytest
import torch

from cpplan.errors import InputError
from cpplan.integrations.art.art_pack import (
    make_planner,
    pack_results_with_plan,
    packed_tensors_from_tokenized_results,
    packer,
)
from cpplan.integrations.art.art_synthetic import GroupShape, SyntheticResult, group_results

SEQ_LEN = 48
SHAPES = [
    GroupShape(num_trajectories=4, prompt_tokens=12, turn_tokens=(3, 8)),
    GroupShape(num_trajectories=3, prompt_tokens=10, turn_tokens=(2, 5), num_turns=3, tool_tokens=(2, 4)),
    GroupShape(num_trajectories=6, prompt_tokens=20, turn_tokens=(10, 15)),
]
CARD = "qwen3-8b"
ART_PARAMETERS = [
    ("tokenized_results", inspect.Parameter.empty),
    ("seq_len", inspect.Parameter.empty),
    ("pad_token_id", -100),
    ("truncate_long_results", True),
    ("advantage_balance", 0.0),
    ("verbosity", 1),
    ("pack_results", True),
]
"""ART 0.5.18's packer parameters and defaults, in order."""


@pytest.fixture(scope="module")
def results():
    """Synthetic tokenized results of three groups (GRPO, multi-turn with tool outputs, one that
    spans rows)."""
    return group_results(SHAPES, vocab_size=64, seed=5)


@pytest.fixture(scope="module")
def planner():
    """A qwen3-8b planner at CP1 with a budget that holds about 115 tokens a row."""
    return make_planner(memory_bytes="1960MiB", card=CARD)


def _visible(tensors, row: int, position: int) -> np.ndarray:
    """Positions ART's rule lets ``position`` of ``row`` attend: causal and (same group or its parent
    group)."""
    group, parent = tensors["group_ids"][row], tensors["parent_ids"][row]
    keys = torch.arange(position + 1)
    return ((group[keys] == group[position]) | (group[keys] == parent[position])).nonzero().flatten().numpy()


@pytest.mark.parametrize("rows_from", ["plan", "first_fit"])
def test_every_result_reads_back_under_arts_mask(results, planner, rows_from):
    """In every row, what the last token of each result's own group may attend under ART's rule is
    exactly one of the row's results: its tokens in order, at its positions, with its assistant mask
    (the prompt shared where the rows share it); each result of the row reads back once; rows from
    the plan and from ART's first-fit at the floors' width alike."""
    packing = pack_results_with_plan(results, SEQ_LEN, planner=planner, pad_token_id=0, rows_from=rows_from)
    assert packing.strategy == rows_from
    tensors = packing.tensors
    assert packing.num_rows >= 2
    for row, members in enumerate(packing.row_results):
        ids, parents = tensors["group_ids"][row], tensors["parent_ids"][row]
        own_groups = sorted({int(g) for g, p in zip(ids, parents, strict=True) if g != p})
        read = []
        for group in own_groups:
            last = int((ids == group).nonzero().max())
            seen = _visible(tensors, row, last)
            read.append(
                (
                    tuple(tensors["tokens"][row, seen].tolist()),
                    tuple(tensors["input_pos"][row, seen].tolist()),
                    tuple(int(m) for m in tensors["assistant_mask"][row, seen].tolist()),
                )
            )
        expected = [
            (packing.results[r].token_ids, packing.results[r].input_pos, packing.results[r].assistant_mask)
            for r in members
        ]
        assert sorted(read) == sorted(expected)


def test_padding_and_ids_follow_arts_conventions(results, planner):
    """Padding carries ART's values (pad token, ids -1, input_pos 0, NaN log-probs, no mask, zero
    weights and advantages); the width is a multiple of ``row_multiple``; no id of a token is -1;
    assistant-masked weights average 1 and the ART keys come in ART's order."""
    tensors = packed_tensors_from_tokenized_results(
        results, SEQ_LEN, pad_token_id=7, planner=planner, row_multiple=16
    )
    assert list(tensors) == [
        "tokens", "group_ids", "parent_ids", "input_pos", "assistant_mask",
        "logprobs", "advantages", "weights", "pixel_values", "image_grid_thw",
    ]  # fmt: skip
    assert tensors["tokens"].shape[1] % 16 == 0
    pad = tensors["group_ids"] == -1
    assert pad.any() and ((tensors["parent_ids"] == -1) == pad).all()
    assert (tensors["tokens"][pad] == 7).all() and (tensors["input_pos"][pad] == 0).all()
    assert tensors["logprobs"][pad].isnan().all() and not tensors["assistant_mask"][pad].any()
    assert (tensors["weights"][pad] == 0).all() and (tensors["advantages"][pad] == 0).all()
    mask = tensors["assistant_mask"]
    assert float(tensors["weights"][mask].mean()) == pytest.approx(1.0, rel=1e-6)
    assert (tensors["weights"][~mask] == 0).all()
    assert tensors["pixel_values"] == [None] * tensors["tokens"].shape[0]


def test_same_results_give_the_same_tensors_and_shuffle_is_seeded(results, planner):
    """Two calls on the same results give equal tensors (deterministic ids and rows); ``shuffle``
    permutes the rows the same way for one seed, and leaves the per-row content as it was."""
    first = pack_results_with_plan(results, SEQ_LEN, planner=planner)
    second = pack_results_with_plan(results, SEQ_LEN, planner=planner)
    for key in ("tokens", "group_ids", "parent_ids", "input_pos", "assistant_mask", "advantages", "weights"):
        assert torch.equal(first.tensors[key], second.tensors[key]), key
    shuffled = [
        pack_results_with_plan(results, SEQ_LEN, planner=planner, shuffle=True, seed=s) for s in (1, 1)
    ]
    assert torch.equal(shuffled[0].tensors["tokens"], shuffled[1].tensors["tokens"])
    assert sorted(shuffled[0].row_results) == sorted(first.row_results)


def test_rows_fit_each_ranks_floor(results):
    """At CP1 and CP2, every row's predicted peak on every rank is within the budget, as planned and as
    ART runs the padded row (even contiguous CP shards), and the step
    (354 tokens unpacked, more than one CP1 row of this budget holds) takes more than one row."""
    for cp in (1, 2):
        packing = pack_results_with_plan(
            results, SEQ_LEN, planner=make_planner(memory_bytes="1960MiB", card=CARD, topology=f"cp={cp}")
        )
        budget = 1960 * 2**20
        assert all(int(wave.prices.peak_bytes.max()) <= budget for wave in packing.result.plan.waves)
        assert packing.num_rows >= 2


def test_signature_is_arts_plus_keyword_settings():
    """The drop-in's positional parameters and defaults are ART 0.5.18's, in order; every cpplan setting
    is keyword-only; :func:`packer` binds the settings and keeps that signature's first seven."""
    parameters = list(inspect.signature(packed_tensors_from_tokenized_results).parameters.values())
    assert [(p.name, p.default) for p in parameters[:7]] == ART_PARAMETERS
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters[7:])
    bound = packer(card=CARD, memory_bytes="2GiB")
    assert bound.keywords["planner"].memory_bytes == 2 * 2**30


def test_bad_results_are_refused_or_reported(results, planner, caplog):
    """Mismatched field lengths and vision inputs raise an InputError naming the result; a result with
    no assistant token after its prompt is left out with a warning (as ART skips it), and a step with
    nothing to train on is refused."""
    good = results[0]
    short = SyntheticResult(**{**vars(good), "logprobs": good.logprobs[:-1]})
    with pytest.raises(InputError, match=r"tokenized_results\[1\].*logprobs"):
        pack_results_with_plan([good, short], SEQ_LEN, planner=planner)
    vision = SyntheticResult(**{**vars(good), "pixel_values": torch.zeros(1, 3)})
    with pytest.raises(InputError, match="vision"):
        pack_results_with_plan([vision], SEQ_LEN, planner=planner)
    silent = SyntheticResult(**{**vars(good), "assistant_mask": [0] * len(good.assistant_mask)})
    with caplog.at_level(logging.WARNING):
        packing = pack_results_with_plan([good, silent], SEQ_LEN, planner=planner)
    assert packing.left_out == ((1, "no assistant token after its prompt (ART skips it)"),)
    assert "tokenized result 1 left out" in caplog.text
    with pytest.raises(InputError, match="no tokenized result"):
        pack_results_with_plan([silent], SEQ_LEN, planner=planner)
    other_prompt = SyntheticResult(**{**vars(results[1]), "token_ids": [63, *results[1].token_ids[1:]]})
    with pytest.raises(InputError, match="shares prompt_id"):
        pack_results_with_plan([good, other_prompt], SEQ_LEN, planner=planner)


def test_cp2_rows_hold_what_a_ranks_floor_admits():
    """Under the same bytes per rank (3 GiB, qwen3-8b), the widest row is about twice as wide at CP2 as
    at CP1 (a row holds what the busiest rank's floor admits, not a global token count), and a GRPO
    step of three groups of eight takes fewer, wider rows at CP2."""
    from cpplan.integrations.art.art_pack import row_width

    shape = GroupShape(num_trajectories=8, prompt_tokens=512, turn_tokens=(128, 512))
    results = group_results([shape] * 3, vocab_size=151_936, seed=1)
    planners = {cp: make_planner(memory_bytes="3GiB", card=CARD, topology=f"cp={cp}") for cp in (1, 2)}
    widths = {cp: row_width(p.settings, 16) for cp, p in planners.items()}
    assert 1.8 * widths[1] <= widths[2] <= 2.6 * widths[1]
    packings = {cp: pack_results_with_plan(results, 2048, planner=p) for cp, p in planners.items()}
    assert packings[2].num_rows < packings[1].num_rows
    assert packings[2].row_tokens > 2048 >= packings[1].row_tokens

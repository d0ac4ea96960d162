"""The split path: an item whose requests cannot all fit in one wave is split along its prefix tree
into consecutive waves marked ``split``; it is refused, naming the request, rank, bytes and budget, only
when a single request cannot fit. The verifier enforces each request exactly once and consecutive,
marked pieces."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

import cpplan
from cpplan.bench.synthetic import to_jsonl
from cpplan.cli import main
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.layout import pack
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave, price_wave
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan

CARD = cpplan.load_model("qwen3-8b")
TOPOLOGY = cpplan.Topology(cp=2)
RNG = np.random.default_rng(7)
PREFIX_A, PREFIX_B = RNG.integers(0, 1000, 1500), RNG.integers(1000, 2000, 1500)


def _tail(n: int) -> np.ndarray:
    return RNG.integers(0, 50_000, n)


def _workload() -> cpplan.Workload:
    """Item 'big' interleaves two prefix families (A, B, A, B); 'small' and 'after' are small items."""
    big = [np.concatenate([PREFIX_A if k % 2 == 0 else PREFIX_B, _tail(400)]) for k in range(4)]
    return cpplan.Workload(
        items=(
            cpplan.Item(id="small", requests=(cpplan.Request(tokens=_tail(300)),)),
            cpplan.Item(id="big", requests=tuple(cpplan.Request(tokens=t) for t in big)),
            cpplan.Item(id="after", requests=(cpplan.Request(tokens=_tail(200)),)),
        )
    )


WORKLOAD = _workload()


def _peak(problem: Problem, requests: list[int]) -> int:
    layout = pack(
        problem.tree, requests, problem.share_mask("full"), problem.request_grad, problem.request_loss
    )
    return price_wave(problem, (1,), layout, "full").peak_bytes


def _problem(budget: int) -> Problem:
    return Problem.build(WORKLOAD, Settings(topology=TOPOLOGY, model=CARD, memory_bytes=budget, num_layers=4))


# At the static floor nothing fits, so each wave is priced with its lowest-peak ownership.
_CARD = _problem(2**50).card
FLOOR = _problem(math.ceil(_CARD.safety * float(_CARD.envelope_static_bytes.max())))
# Tree requests of item 'big' are 1..4: 1 and 3 share prefix A, 2 and 4 share prefix B.
PAIR_A = _peak(FLOOR, [1, 3])
WHOLE = _peak(FLOOR, [1, 2, 3, 4])
SINGLE = max(_peak(FLOOR, [r]) for r in (1, 2, 3, 4))


def test_budgets_make_sense():
    """The pair sharing prefix A fits where the whole item does not, and one request is the floor."""
    assert SINGLE < PAIR_A < WHOLE


def _split_plan(strategy_layouts=("full", "none")):
    problem = _problem((PAIR_A + WHOLE) // 2)
    return problem, greedy_plan(problem, strategy_layouts)


def test_oversized_item_is_split_into_consecutive_marked_waves():
    """'big' does not fit one wave: it becomes consecutive split waves holding each of its requests
    exactly once, the plan verifies, and the waves before and after are ordinary."""
    problem, plan = _split_plan()
    data = plan_to_dict(problem, plan)
    owners = [w["items"] for w in data["waves"]]
    marked = [w["split"] for w in data["waves"]]
    big_waves = [i for i, items in enumerate(owners) if items == ["big"]]
    assert len(big_waves) >= 2
    assert big_waves == list(range(big_waves[0], big_waves[-1] + 1))
    assert all(marked[i] for i in big_waves)
    assert not any(marked[i] for i in range(len(owners)) if i not in big_waves)
    held = sorted(r["request"] for i in big_waves for r in data["waves"][i]["requests"])
    assert held == [0, 1, 2, 3]
    assert sum(w.logical_tokens for w in plan.waves) == WORKLOAD.num_tokens
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations


def test_split_follows_the_prefix_tree():
    """Pieces group requests that share a prefix: with room for two requests, the pieces are the A pair
    and the B pair (not the item's A, B, A, B order), each storing its shared prefix once."""
    problem, plan = _split_plan()
    pieces = [w for w in plan.waves if w.split]
    groups = sorted(sorted(int(problem.request_index[r]) for r in w.layout.request_ids) for w in pieces)
    assert groups == [[0, 2], [1, 3]]
    for wave in pieces:
        assert wave.packed_tokens == 1500 + 2 * 400


def test_an_item_some_wave_holds_whole_is_never_split():
    """The split path is only for an item no wave holds whole: at a budget where 'big' fits one
    full-sharing wave but no unshared one, greedy over the unshared layout alone still plans it whole,
    in its full-sharing wave, not in split pieces."""
    problem = _problem(WHOLE)
    assert best_wave(problem, (1,), ("none",))[0] is None  # unshared, 'big' fits no wave
    plan = greedy_plan(problem, ("none",))
    assert not plan.splits_an_item
    assert [w.layout_name for w in plan.waves if 1 in w.items] == ["full"]


def test_split_through_the_portfolio_and_cli(tmp_path):
    """cpplan.plan returns the split plan (stated as split in the JSON) and the CLI exits 0 with it."""
    budget = (PAIR_A + WHOLE) // 2
    result = cpplan.plan(WORKLOAD, topology=TOPOLOGY, model=CARD, memory_bytes=budget, num_layers=4)
    assert any(w.split for w in result.plan.waves)
    (tmp_path / "w.jsonl").write_text(to_jsonl(WORKLOAD))
    out = tmp_path / "plan.json"
    args = ["plan", str(tmp_path / "w.jsonl"), "--model", "qwen3-8b", "--topology", "cp=2"]
    code = main([*args, "--memory", str(budget), "--layers", "4", "--output", str(out), "--quiet"])
    assert code == 0
    assert any(w["split"] for w in json.loads(out.read_text())["waves"])


def test_refusal_only_when_one_request_cannot_fit(capsys, tmp_path):
    """Below the largest single request's peak the item is refused with the item, request, rank, bytes
    and budget (exit 3 from the CLI); between it and the whole item's peak the item is split instead."""
    budget = SINGLE - 1
    with pytest.raises(cpplan.NoFitError) as info:
        greedy_plan(_problem(budget), ("full", "none"))
    error = info.value
    assert error.item == "big"
    assert error.request in (0, 1, 2, 3)
    assert error.needed_bytes > error.memory_bytes == budget
    assert error.rank in (0, 1)
    message = str(error)
    assert f"{error.needed_bytes:,} bytes" in message and f"{budget:,} bytes" in message
    assert f"rank {error.rank}" in message and f"request {error.request}" in message
    assert greedy_plan(_problem(SINGLE), ("full", "none")).num_waves >= 4
    (tmp_path / "w.jsonl").write_text(to_jsonl(WORKLOAD))
    args = ["plan", str(tmp_path / "w.jsonl"), "--model", "qwen3-8b", "--topology", "cp=2", "--layers", "4"]
    assert main([*args, "--memory", str(budget), "--quiet"]) == 3
    assert "does not fit" in capsys.readouterr().err


def _verdict(problem: Problem, data: dict):
    return verify_plan(data, problem.workload, problem.card, problem.memory_bytes)


def test_verifier_rejects_pieces_that_are_not_consecutive():
    """Moving a split piece after the following item's wave breaks consecutiveness."""
    problem, plan = _split_plan()
    data = plan_to_dict(problem, plan)
    last_piece = max(i for i, w in enumerate(data["waves"]) if w["split"])
    waves = data["waves"]
    waves[last_piece], waves[last_piece + 1] = waves[last_piece + 1], waves[last_piece]
    verdict = _verdict(problem, data)
    assert any("not consecutive" in v for v in verdict.violations), verdict.violations


def test_verifier_rejects_unmarked_pieces():
    """A piece of a split item that is not marked split is a violation."""
    problem, plan = _split_plan()
    data = plan_to_dict(problem, plan)
    first_piece = min(i for i, w in enumerate(data["waves"]) if w["split"])
    data["waves"][first_piece]["split"] = False
    verdict = _verdict(problem, data)
    assert any("not marked split" in v for v in verdict.violations), verdict.violations


def test_verifier_still_enforces_each_request_exactly_once():
    """Split waves do not relax the exactly-once rule: a dropped piece leaves requests in no wave and a
    repeated piece puts requests in two waves."""
    problem, plan = _split_plan()
    data = plan_to_dict(problem, plan)
    pieces = [i for i, w in enumerate(data["waves"]) if w["split"]]
    dropped = copy.deepcopy(data)
    del dropped["waves"][pieces[-1]]
    assert any("is in no wave" in v for v in _verdict(problem, dropped).violations)
    repeated = copy.deepcopy(data)
    repeated["waves"].insert(pieces[-1] + 1, copy.deepcopy(data["waves"][pieces[-1]]))
    assert any("appears in waves" in v for v in _verdict(problem, repeated).violations)


def test_split_waves_materialize_and_read_back():
    """Each split piece materializes on every CP rank (from the Plan and from its JSON), and every
    request it holds reads back as exactly its own tokens from the packed sequence."""
    from cpplan.runtime.materialize import materialize_wave

    problem, plan = _split_plan()
    data = plan_to_dict(problem, plan)
    pieces = [w for w, wave in enumerate(plan.waves) if wave.split]
    for w in pieces:
        for source in (plan, data):
            batches = materialize_wave(source, WORKLOAD, wave=w)
            assert len(batches) == TOPOLOGY.cp
            packed = np.zeros(batches[0].packed_tokens, dtype=np.int64)
            for batch in batches:
                packed[batch.packed_index.numpy()] = batch.input_ids.numpy()
            for k, (item_id, index) in enumerate(batches[0].requests):
                assert item_id == "big"
                expected = WORKLOAD.items[1].requests[index].tokens
                assert np.array_equal(packed[batches[0].readback(k).numpy()], expected)

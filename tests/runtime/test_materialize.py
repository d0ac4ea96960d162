"""Per-rank materialization: owned tokens, whole-wave tree metadata, read-back and loss indices."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cpplan
from cpplan import InputError, Item, Request, Workload
from cpplan.bench import synthetic
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.layout import pack
from cpplan.pricing.wave import price_wave
from cpplan.runtime.materialize import materialize_wave
from tests.support.prefix_trees import LAYOUTS, build_problem, hand_plan, prefix_workloads

SETTINGS = settings(max_examples=40, deadline=None)
TENSORS = (
    "input_ids",
    "position_ids",
    "packed_index",
    "segment_ids",
    "parent_ids",
    "token_owner",
    "seg_parent",
    "seg_offset",
    "seg_length",
    "seg_position",
    "readback_index",
    "readback_ptr",
    "loss_index",
    "loss_targets",
    "loss_weights",
)


def _plans(data, workload):
    cp = data.draw(st.integers(1, 8), label="cp")
    problem = build_problem(workload, cp=cp, chunk_tokens=data.draw(st.sampled_from((1, 4, 16))))
    plan = hand_plan(
        problem,
        layout=data.draw(st.sampled_from(LAYOUTS), label="layout"),
        num_waves=data.draw(st.integers(1, 2), label="waves"),
        owner_seed=data.draw(st.none() | st.integers(0, 2**16), label="owner_seed"),
    )
    return problem, plan


@SETTINGS
@given(workload=prefix_workloads(), data=st.data())
def test_rank_batches_rebuild_the_packed_wave(workload, data):
    """Ranks own disjoint token sets covering the wave; their ids, positions and the whole-wave segment
    and parent ids equal the layout's own per-token metadata; ranges list exactly the owned positions;
    and every request's read-back indices return its tokens at positions 0..n-1."""
    problem, plan = _plans(data, workload)
    for w, wave in enumerate(plan.waves):
        meta = wave.layout.token_metadata(problem.tree)
        batches = [cpplan.materialize(plan, workload, wave=w, rank=r) for r in range(problem.topology.cp)]
        owned = np.sort(np.concatenate([b.packed_index.numpy() for b in batches]))
        assert np.array_equal(owned, np.arange(wave.packed_tokens))
        full_ids = np.empty(wave.packed_tokens, dtype=np.int64)
        for b in batches:
            for name in ("input_ids", "position_ids", "packed_index"):
                tensor = getattr(b, name)
                assert tensor.dtype == torch.int64 and tensor.dim() == 1
            index = b.packed_index.numpy()
            assert np.all(np.diff(index) > 0)
            assert np.array_equal(b.input_ids.numpy(), meta["input_ids"][index])
            assert np.array_equal(b.position_ids.numpy(), meta["position_ids"][index])
            assert np.array_equal(b.segment_ids.numpy(), meta["segment_ids"])
            assert np.array_equal(b.parent_ids.numpy(), meta["parent_ids"])
            expanded = [p for lo, hi in b.ranges for p in range(lo, hi)]
            assert expanded == index.tolist()
            full_ids[index] = b.input_ids.numpy()
        expected = [
            (workload.items[i].id, k) for i in wave.items for k in range(len(workload.items[i].requests))
        ]
        assert sorted(batches[0].requests) == sorted(expected)
        for k, (item_id, index) in enumerate(batches[0].requests):
            tokens = workload.items[workload.index_of[item_id]].requests[index].tokens
            readback = batches[0].readback(k).numpy()
            assert np.array_equal(full_ids[readback], tokens)
            assert np.array_equal(meta["position_ids"][readback], np.arange(tokens.size))


@SETTINGS
@given(workload=prefix_workloads(masks=True), data=st.data())
def test_loss_pairs_are_every_counted_target(workload, data):
    """With random loss masks (and requests without one), the ranks' weighted (packed position,
    target) pairs are, as a multiset, exactly the next-token targets each request counts (token t + 1
    where ``predicted()[t]`` is set), read at its read-back positions; each pair is listed once, on the
    rank owning its position, and a request that wants logits, hidden states or nothing adds none."""
    _, plan = _plans(data, workload)
    for w in range(plan.num_waves):
        batches = materialize_wave(plan, workload, wave=w)
        got: Counter = Counter()
        for b in batches:
            positions = b.packed_index[b.loss_index].tolist()
            pairs = list(zip(positions, b.loss_targets.tolist(), strict=True))
            assert len(set(pairs)) == len(pairs)
            assert b.token_owner[b.packed_index[b.loss_index]].eq(b.rank).all()
            for pair, n in zip(pairs, b.loss_weights.tolist(), strict=True):
                assert n > 0
                got[pair] += n
        want: Counter = Counter()
        for k, (item_id, index) in enumerate(batches[0].requests):
            request = workload.items[workload.index_of[item_id]].requests[index]
            readback = batches[0].readback(k).tolist()
            for t in np.flatnonzero(request.predicted()).tolist():
                want[(readback[t], int(request.tokens[t + 1]))] += 1
        assert got == want


def test_siblings_starting_alike_share_one_pair():
    """Two requests that continue a shared prompt with the same token, each in its own copy (the
    one-token node they share is not shared): the prompt's last token predicts that token once, with
    weight 2; a request whose mask marks nothing adds no pair."""
    workload = Workload(
        items=(
            Item(
                id="g",
                requests=(
                    Request(tokens=[1, 2, 3, 4, 5, 9], loss_mask=[0, 0, 0, 1, 1, 1]),
                    Request(tokens=[1, 2, 3, 4, 6], loss_mask=[0, 0, 0, 1, 1]),
                    Request(tokens=[1, 2, 3, 8], loss_mask=[0, 0, 0, 0]),
                ),
            ),
        )
    )
    problem = build_problem(workload, cp=1, chunk_tokens=4)
    layout = problem.pack([0], "min_span:3")
    assert layout.num_segments == 4
    plan = cpplan.Plan(strategy="test", waves=(price_wave(problem, (0,), layout, "min_span:3"),))
    (batch,) = materialize_wave(plan, workload, wave=0)
    pairs = list(zip(batch.packed_index[batch.loss_index].tolist(), batch.loss_targets.tolist(), strict=True))
    weights = dict(zip(pairs, batch.loss_weights.tolist(), strict=True))
    assert weights.pop((2, 4)) == 2
    assert sorted(t for _, t in weights) == [5, 6, 9] and set(weights.values()) == {1}


def test_grpo_plan_contract():
    """On a planned GRPO workload (CP4, as in DESIGN's example), ``cpplan.materialize`` gives each rank
    its owned ranges exactly as the plan JSON lists them, and the wave's packed tokens once."""
    wl = synthetic.grpo(
        num_prompts=3, group_size=4, system_tokens=300, prompt_tokens=500, completion_tokens=100
    )
    result = cpplan.plan(
        wl, topology=cpplan.Topology(cp=4), model="qwen3-8b", memory_bytes=80 * 2**30, solver="deterministic"
    )
    data = result.to_dict()
    for w, wave in enumerate(data["waves"]):
        total = 0
        for rank in range(4):
            batch = cpplan.materialize(result.plan, wl, wave=w, rank=rank)
            assert isinstance(batch, cpplan.RankBatch)
            assert [list(r) for r in batch.ranges] == wave["ranks"][rank]["ranges"]
            assert batch.num_tokens == wave["ranks"][rank]["tokens"]
            total += batch.num_tokens
        assert total == wave["packed_tokens"] < wave["logical_tokens"]


def test_materialize_wave_equals_per_rank_calls():
    """``materialize_wave`` (whole-wave work done once) returns the same batches as one
    ``materialize`` call per rank."""
    wl = synthetic.agent_trees(num_trees=2, depth=3, branching=2, turn_tokens=(20, 60))
    problem = build_problem(wl, cp=3, chunk_tokens=16)
    plan = cpplan.Plan(
        strategy="test", waves=hand_plan(problem, layout="full", num_waves=1, owner_seed=3).waves
    )
    together = materialize_wave(plan, wl, wave=0)
    for rank, batch in enumerate(together):
        alone = cpplan.materialize(plan, wl, wave=0, rank=rank)
        for name in (
            "input_ids",
            "position_ids",
            "packed_index",
            "loss_index",
            "loss_targets",
            "loss_weights",
        ):
            assert torch.equal(getattr(batch, name), getattr(alone, name)), name
        assert batch.ranges == alone.ranges
    assert sum(b.num_tokens for b in together) == plan.waves[0].packed_tokens


def _small_plan():
    wl = synthetic.grpo(num_prompts=2, group_size=2, system_tokens=20, prompt_tokens=30, completion_tokens=10)
    problem = build_problem(wl, cp=2, chunk_tokens=8)
    return wl, hand_plan(problem, layout="full", num_waves=2, owner_seed=None)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wave": 2, "rank": 0}, "wave"),
        ({"wave": -1, "rank": 0}, "wave"),
        ({"wave": 0, "rank": 2}, "rank"),
        ({"wave": 0, "rank": True}, "rank"),
    ],
)
def test_out_of_range_arguments_name_the_field(kwargs, field):
    """A wave or rank outside the plan is an InputError naming the field and the plan's size."""
    wl, plan = _small_plan()
    with pytest.raises(InputError, match="out of range") as info:
        cpplan.materialize(plan, wl, **kwargs)
    assert info.value.field == field


def test_wrong_workload_is_refused():
    """Materializing against a workload the plan was not made for (one request one token longer, or
    fewer requests) raises an InputError naming the request, not a silent wrong batch."""
    wl, plan = _small_plan()
    longer = list(wl.items)
    first = longer[0].requests[1]
    longer[0] = Item(
        id=longer[0].id,
        requests=(longer[0].requests[0], Request(tokens=np.append(first.tokens, 7))),
    )
    with pytest.raises(InputError, match="does not match the workload") as info:
        cpplan.materialize(plan, Workload(items=tuple(longer)), wave=0, rank=0)
    assert info.value.field == "items[0].requests[1]"
    with pytest.raises(InputError, match="workload has only"):
        cpplan.materialize(plan, Workload(items=wl.items[:1]), wave=1, rank=0)
    with pytest.raises(InputError, match="expected a Plan"):
        cpplan.materialize([plan], wl, wave=0, rank=0)


def test_same_shape_other_tokens_is_refused():
    """A workload with the planned lengths but one token changed (so a read-back would return the wrong
    id) is refused with an InputError naming the position and a request of the item that disagrees with
    the packed copy (the shared prefix is copied from one request, so either may be named)."""
    wl, plan = _small_plan()
    items = list(wl.items)
    tokens = items[1].requests[0].tokens.copy()
    tokens[3] += 1
    items[1] = Item(id=items[1].id, requests=(Request(tokens=tokens), items[1].requests[1]))
    with pytest.raises(InputError, match=r"token 3 of item 'p1' request [01]") as info:
        cpplan.materialize(plan, Workload(items=tuple(items)), wave=1, rank=0)
    assert info.value.field in ("items[1].requests[0].tokens", "items[1].requests[1].tokens")


@SETTINGS
@given(workload=prefix_workloads(), data=st.data())
def test_plan_json_materializes_like_the_plan(workload, data, tmp_path_factory):
    """The plan file JSON (loaded, or as a path) gives every rank the same batch as the Plan object."""
    problem, plan = _plans(data, workload)
    text = json.dumps(plan_to_dict(problem, plan))
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(text)
    for w in range(plan.num_waves):
        for rank in range(problem.topology.cp):
            want = cpplan.materialize(plan, workload, wave=w, rank=rank)
            for source in (json.loads(text), path):
                got = cpplan.materialize(source, workload, wave=w, rank=rank)
                assert got.ranges == want.ranges and got.requests == want.requests
                for name in TENSORS:
                    assert torch.equal(getattr(got, name), getattr(want, name)), name


def _share_completions(data):
    """Claim the two different completions share one segment: well formed, wrong tokens."""
    wave = data["waves"][0]
    wave["segments"].pop()
    wave["requests"][1]["segments"] = [0, 1]
    wave["ranks"][1]["ranges"] = [[wave["ranks"][1]["ranges"][0][0], 60]]  # rank 1 keeps its start


def _json_plan():
    wl, plan = _small_plan()
    problem = build_problem(wl, cp=2, chunk_tokens=8)
    return wl, json.loads(json.dumps(plan_to_dict(problem, plan)))


def _first_request(**changes):
    return lambda d: d["waves"][0]["requests"][0].update(**changes)


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d["waves"][0].pop("segments"), "waves[0].segments", "must be a list of"),
        (lambda d: d["waves"][0]["segments"].append([7, 0, 1]), "waves[0].segments", "earlier segment"),
        (lambda d: d["waves"][0]["segments"][1].append(1), "waves[0].segments", "a list of [int, int, int]"),
        (_first_request(item="nope"), "waves[0].requests[0].item", "not in"),
        (_first_request(item=["p0"]), "waves[0].requests[0].item", "not in"),
        (_first_request(request=9), "waves[0].requests[0].request", "no request"),
        (_first_request(request=True), "waves[0].requests[0].request", "no request"),
        (_first_request(segments=[0, 99]), "waves[0].requests[0].segments", "must list segments in [0, 3)"),
        (_first_request(segments=[1, 0]), "items[0].requests[0]", "root-to-leaf"),
        (lambda d: d["waves"][0]["ranks"][1]["ranges"].clear(), "waves[0].ranks", "owned by no rank"),
        (lambda d: d["waves"][0]["ranks"][1]["ranges"].append([0, 1]), "waves[0].ranks", "owned by 2 ranks"),
        (
            lambda d: d["waves"][0]["ranks"][0].update(ranges=[[5, 2]]),
            "waves[0].ranks[0].ranges",
            "[start, end)",
        ),
        (lambda d: d["waves"][0]["ranks"].pop(), "waves[0].ranks", "must list the 2 CP ranks"),
        (lambda d: d["topology"].update(cp=0), "topology.cp", "positive integer"),
        (lambda d: d["waves"][0]["segments"].append([0, 50, 10]), "waves[0].segments", "segment 3 is in no"),
        (_share_completions, "items[0].requests[1].tokens", "give token 50 of item 'p0' request 1"),
    ],
)
def test_malformed_plan_json_names_the_field(edit, field, message):
    """Each malformed plan-file field is an InputError naming that field, never a traceback."""
    wl, data = _json_plan()
    edit(data)
    with pytest.raises(InputError) as info:
        cpplan.materialize(data, wl, wave=0, rank=0)
    assert info.value.field == field
    assert message in str(info.value)


def test_unreadable_plan_file_names_the_file(tmp_path):
    """A missing or non-JSON plan file is an InputError naming the file."""
    wl, _ = _small_plan()
    with pytest.raises(InputError, match="cannot read plan") as info:
        cpplan.materialize(tmp_path / "missing.json", wl, wave=0, rank=0)
    assert info.value.file == str(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="malformed JSON"):
        cpplan.materialize(bad, wl, wave=0, rank=0)


def test_split_wave_holds_a_subset_of_an_items_requests():
    """A split wave (some requests of one item, as the split path makes) materializes exactly those
    requests: read-back returns their tokens and the ranks own the packed tokens once."""
    wl = synthetic.agent_trees(num_trees=1, depth=3, branching=3, turn_tokens=(5, 20), seed=4)
    problem = build_problem(wl, cp=2, chunk_tokens=8)
    subset = problem.item_requests([0])[[1, 4, 5, 8]]
    layout = pack(
        problem.tree, subset, problem.share_mask("full"), problem.request_grad, problem.request_loss
    )
    plan = cpplan.Plan(strategy="test", waves=(price_wave(problem, (0,), layout, "full", split=True),))
    batches = materialize_wave(plan, wl, wave=0)
    assert batches[0].requests == tuple(("tree0", int(r)) for r in subset)
    ids = np.empty(batches[0].packed_tokens, dtype=np.int64)
    for b in batches:
        ids[b.packed_index.numpy()] = b.input_ids.numpy()
    assert sum(b.num_tokens for b in batches) == layout.packed_tokens
    for k, (_, index) in enumerate(batches[0].requests):
        assert np.array_equal(ids[batches[0].readback(k).numpy()], wl.items[0].requests[index].tokens)

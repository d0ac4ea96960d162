"""The default call at dp > 1 under the runtime and trainer profiles plans the partitioned step, and every
rank computes the same partition however its items were made."""

from __future__ import annotations

import numpy as np
import pytest

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.plans.plan_writer import strip_timing
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan

MODEL = "qwen3.6-35b-a3b"


def step(num_prompts: int = 12, seed: int = 0) -> Workload:
    """A small GRPO step: one item per prompt of 300-1,500 tokens x 4 completions of 50-400 tokens."""
    return grpo(
        num_prompts=num_prompts,
        group_size=4,
        system_tokens=64,
        prompt_tokens=(300, 1500),
        completion_tokens=(50, 400),
        seed=seed,
    )


def planner(solver: str, dp: int = 4, cp: int = 2) -> cpplan.Planner:
    """A planner of 4 layers of the Qwen3.6 card over ``dp`` replicas of CP ``cp``."""
    topology = cpplan.Topology(dp=dp, cp=cp)
    return cpplan.Planner(model=MODEL, topology=topology, memory_bytes="3.5GiB", solver=solver, num_layers=4)


def blocks(result: cpplan.PlanResult, cp: int) -> dict[int, set[str]]:
    """Per pool block (replica), the ids of the items its waves run."""
    found: dict[int, set[str]] = {}
    for wave in result.to_dict()["waves"]:
        found.setdefault(wave["gpus"][0] // cp, set()).update(wave["items"])
    return found


def replica_ids(p: cpplan.Planner, workload: Workload) -> dict[int, set[str]]:
    """Per replica, the ids of the items the planner's partition gives it."""
    part = p.partition(workload)
    return {k: {workload.items[i].id for i in part.items(k)} for k in range(part.num_replicas)}


def test_default_call_under_trainer_is_the_assembled_partitioned_step():
    """Under the trainer profile (deterministic) ``plan(wl)`` at dp = 4 is, byte for byte, the step
    assembled from every replica's share (``replica="all"``): each replica's block runs exactly its
    partition's items, and the plan passes the independent verifier."""
    wl = step(seed=1)
    p = planner("trainer")
    default = p.plan(wl)
    assert (
        strip_timing(default.to_dict())["waves"] == strip_timing(p.plan(wl, replica="all").to_dict())["waves"]
    )
    assert blocks(default, 2) == replica_ids(p, wl)
    data = default.to_dict()
    verdict = verify_plan(data, wl, default.problem.card, default.problem.memory_bytes)
    assert verdict.valid, verdict.violations


@pytest.mark.parametrize("one_shot", [False, True])
def test_default_call_under_runtime_runs_every_share_on_its_replica(one_shot: bool):
    """Under the runtime profile, ``Planner.plan(wl)`` and ``cpplan.plan(...)`` at dp = 4 return the
    partitioned step: every replica runs waves, each replica's block exactly its partition's items."""
    wl = step(seed=2)
    p = planner("runtime")
    if one_shot:
        result = cpplan.plan(
            wl,
            topology=p.settings.topology,
            model=MODEL,
            memory_bytes="3.5GiB",
            num_layers=4,
            solver="runtime",
        )
    else:
        result = p.plan(wl, 5.0)
    assert blocks(result, 2) == replica_ids(p, wl)
    assert p.partitions(wl)


def test_reference_profiles_and_small_steps_plan_jointly():
    """The deterministic and offline profiles (the references) keep the joint plan at dp > 1, and a step
    with fewer items than replicas is planned jointly under the runtime profile too."""
    wl = step(num_prompts=6)
    for solver in ("deterministic", "offline"):
        assert not planner(solver).partitions(wl)
    runtime = planner("runtime", dp=8, cp=1)
    few = step(num_prompts=3)
    assert not runtime.partitions(few)
    assert runtime.plan(few, 5.0).problem.workload is few  # joint: the result is over the whole step
    assert not planner("runtime", dp=1).partitions(wl)


def copied(workload: Workload, order: np.ndarray) -> Workload:
    """The same items (ids, tokens, flags) rebuilt from fresh arrays, in ``order``."""
    items = []
    for i in order.tolist():
        item = workload.items[i]
        requests = tuple(Request(tokens=np.array(r.tokens.tolist()), grad=r.grad) for r in item.requests)
        items.append(Item(id=item.id, requests=requests))
    return Workload(items=tuple(items))


def test_two_ranks_compute_the_same_partition_and_default_plan():
    """Two planners (two ranks) given the step as different objects, its items in another order in
    memory and its token arrays copied, give every item the same replica, and under the trainer profile
    the same default plan (waves and their items, byte for byte)."""
    wl = step(num_prompts=16, seed=5)
    shuffled = copied(wl, np.random.default_rng(1).permutation(wl.num_items))
    a, b = planner("trainer"), planner("trainer")
    mine = {wl.items[i].id: r for i, r in enumerate(a.partition(wl).replica_of_item)}
    theirs = {shuffled.items[i].id: r for i, r in enumerate(b.partition(shuffled).replica_of_item)}
    assert mine == theirs
    assert len(set(mine.values())) == 4
    again = copied(wl, np.arange(wl.num_items))
    first = strip_timing(a.plan(wl).to_dict())
    second = strip_timing(b.plan(again).to_dict())
    assert first["waves"] == second["waves"]
    assert first["cost_s"] == second["cost_s"]


def test_digest_level_hashes_are_each_items_prefix_hashes():
    """Every item's digest holds the prefix hash of its first request at every level it reaches (0
    where it does not), on items sharing prefixes at several levels; the step's gathered hashes are
    the items' rows."""
    from cpplan.planners.replica_partition import PREFIX_LEVELS, StepDigests
    from tests.support.prefix_samples import prefix_hashes

    rng = np.random.default_rng(3)
    system = rng.integers(0, 1000, 2048)
    firsts = [
        np.concatenate([system[: rng.integers(0, 2048)], rng.integers(0, 1000, n)]) for n in (5, 300, 40_000)
    ]
    firsts += [firsts[1].copy(), np.concatenate([firsts[2][:20_000], rng.integers(0, 1000, 10)])]
    wl = Workload(items=tuple(Item(id=f"i{k}", requests=(Request(tokens=f),)) for k, f in enumerate(firsts)))
    got = StepDigests.of(wl).level_hashes
    for row, first in enumerate(firsts):
        want = prefix_hashes(first, PREFIX_LEVELS)
        assert {level: int(got[row, c]) for c, level in enumerate(PREFIX_LEVELS) if level in want} == want
        assert all(got[row, c] == 0 for c, level in enumerate(PREFIX_LEVELS) if level not in want)
    assert got[1].tolist() == got[3].tolist() and got[2, 1] == got[4, 1] and got[2, 0] != got[4, 0]


def every_request_price(workload: Workload, card, cp: int) -> np.ndarray:
    """The quick price with every request compared with its item's first (the rule before one pair)."""
    from cpplan.spec.quantities import QUANTITIES

    coefficients = card.constants.time_coefficients
    per_token = sum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "token")
    per_pair = sum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "pair")
    from tests.support.prefix_samples import sampled_prefixes

    owners, lengths, common = sampled_prefixes(workload)
    n, c = lengths.astype(float), common.astype(float)
    first = np.array([item.requests[0].tokens.size for item in workload.items], dtype=float)
    tokens = first + np.bincount(owners, weights=n - c, minlength=workload.num_items)
    pairs = first * (first + 1) / 2 + np.bincount(owners, weights=(n * (n + 1) - c * (c + 1)) / 2)
    return (per_token * tokens + per_pair * pairs) / cp


def test_quick_price_reads_one_request_pair_per_item():
    """The quick price compares only each item's second request with its first: on GRPO groups
    (completions sharing their prompt) it equals the price comparing every request; on an item whose
    third request shares less than the second, the third is priced as sharing what the second does."""
    from cpplan.planners.replica_partition import StepDigests

    def item_prices_s(workload: Workload, card, cp: int) -> np.ndarray:
        """The partition's quick price of every item of ``workload``."""
        return StepDigests.of(workload).prices_s(card, cp)

    wl = step(num_prompts=6, seed=4)
    card = planner("trainer").card
    assert item_prices_s(wl, card, 2) == pytest.approx(every_request_price(wl, card, 2), rel=1e-12)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 1000, 2048)
    requests = [np.concatenate([prompt, rng.integers(0, 1000, 300)]) for _ in range(2)]
    requests.append(np.concatenate([prompt[:256], rng.integers(0, 1000, 2092)]))
    odd = Workload(items=(Item(id="x", requests=tuple(Request(tokens=t) for t in requests)),))
    assert item_prices_s(odd, card, 2)[0] < every_request_price(odd, card, 2)[0]
    as_second = Workload(items=(Item(id="x", requests=tuple(Request(tokens=t) for t in requests[:2])),))
    third_alone = every_request_price(as_second, card, 2)[0]
    assert item_prices_s(odd, card, 2)[0] > third_alone  # the third still adds its own 300 tokens


def test_the_verifier_prices_an_assembled_step_by_its_slowest_replica():
    """An assembled step lists each replica's winner; the verifier accepts it as it is and refuses it
    once the slowest replica's stated cost no longer matches the step's (its makespan)."""
    wl = step(seed=1)
    result = planner("trainer").plan(wl)
    data = result.to_dict()
    card, memory = result.problem.card, result.problem.memory_bytes
    assert verify_plan(data, wl, card, memory).valid
    slowest = max(data["candidates"], key=lambda c: c["cost_s"])
    slowest["cost_s"] *= 0.9
    verdict = verify_plan(data, wl, card, memory)
    assert not verdict.valid
    assert any("slowest replica's plan" in v for v in verdict.violations), verdict.violations


def test_the_partition_reads_each_items_digest_not_its_tokens():
    """An item's prefix digest is computed when the item is validated, and partitioning a step reads
    the digests alone: with every request's tokens swapped afterwards for other ids (on a copy), the
    partition and its prices are unchanged, and a fresh item of those other ids digests differently."""
    import copy

    from cpplan.planners.replica_partition import partition_items

    wl = step(num_prompts=12, seed=6)
    p = planner("trainer")
    want = partition_items(wl, p.card, p.settings.topology)
    swapped = copy.deepcopy(wl)
    for item in swapped.items:
        for request in item.requests:
            request.__dict__["tokens"] = request.tokens[::-1].copy()  # frozen model: past validation
    got = partition_items(swapped, p.card, p.settings.topology)
    assert got.replica_of_item == want.replica_of_item and got.item_price_s == want.item_price_s
    fresh = Item(id="x", requests=tuple(Request(tokens=r.tokens) for r in swapped.items[0].requests))
    assert fresh.prefix_digest != wl.items[0].prefix_digest

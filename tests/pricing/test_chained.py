"""Chained ownership: a wave's ranks take over round its packed order, the last rank's range wrapping round
the end, so that every rank runs work in both rounds of the GDN hand-off; the version is priced exactly,
kept only where it fits and is cheaper, and the planner proposes it."""

from __future__ import annotations

import numpy as np
import pytest

import cpplan
from cpplan import Topology
from cpplan.bench.suites import grpo_shuffled
from cpplan.pricing.chained import chained_wave, rotated_owner, rotation_starts, unit_orders
from cpplan.pricing.layout import layout_share_mask
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave, price_wave
from cpplan.spec.settings import Settings

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def shuffled_cp4(qwen36) -> Problem:
    """Eight GRPO groups of 8 rollouts, one item each, arriving shuffled, at CP4 and 40 GiB per rank."""
    settings = Settings(topology=Topology(cp=4), model=qwen36, memory_bytes=40 * 2**30)
    return Problem.build(grpo_shuffled(), settings)


def _one_wave(problem: Problem):
    """The cheapest fitting wave of every item over :data:`LAYOUTS`."""
    wave, _ = best_wave(problem, tuple(range(problem.num_items)), LAYOUTS)
    assert wave is not None
    return wave


def test_the_read_back_mask_packs_every_layout_as_it_was(shuffled_cp4, qwen36):
    """For every layout spec, on GRPO groups and on agent trees, the mask read back from the packed
    segments packs the same requests into the same segments (parents, offsets, lengths, sources and
    every request's chain equal)."""
    from cpplan.bench.synthetic import agent_trees

    settings = Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=40 * 2**30)
    trees = Problem.build(agent_trees(num_trees=3, depth=3, branching=2, turn_tokens=(100, 400)), settings)
    for problem in (shuffled_cp4, trees):
        items = list(range(problem.num_items))[::-1]
        for spec in ("full", "none", "min_span:512", "depth:1", "depth:2"):
            layout = problem.pack(items, spec)
            again = problem.pack(items, layout_share_mask(problem.tree, layout))
            for name in ("seg_parent", "seg_offset", "seg_length", "seg_src", "request_segments"):
                assert np.array_equal(getattr(layout, name), getattr(again, name)), (spec, name)


def test_the_last_rank_wraps_round_the_end():
    """A rotated split starts rank 0 at its start chunk, gives every rank one run of chunks taken round
    the packed order in rank order, and the last rank's run ends just before the start (wrapping round
    the end); at start 0 it is a plain contiguous split."""
    rng = np.random.default_rng(0)
    seconds = rng.random((40, 2))
    for start in (0, 7, 13):
        owner = rotated_owner(seconds, start, 4)
        taken = owner[(np.arange(40) + start) % 40]
        assert taken[0] == 0 and taken[-1] == 3
        assert (np.diff(taken) >= 0).all() and set(taken.tolist()) == {0, 1, 2, 3}
        assert owner[start - 1] == 3
    assert (np.diff(rotated_owner(seconds, 0, 4)) >= 0).all()
    assert rotation_starts(40, 4, 4).tolist() == [0, 2, 5, 7]
    assert rotation_starts(3, 4, 8).tolist() == [0]


def test_units_alternate_largest_and_smallest():
    """The second order takes the largest unit, then the smallest, then the second largest, and so on
    (ties in packed order); the first is the packed order."""
    packed, alternating = unit_orders(np.array([5, 9, 1, 7, 3]))
    assert packed.tolist() == [0, 1, 2, 3, 4]
    assert alternating.tolist() == [1, 2, 3, 4, 0]


def test_chained_grpo_wave_is_cheaper_exact_and_wraps(shuffled_cp4):
    """On shuffled GRPO groups at CP4 the chained version of the cheapest wave over the proposers'
    layouts fits, costs over 2% less, runs its hand-off in two rounds, and its price is the evaluator's
    for its own layout and ownership. Its last rank's chunks are not one run in packed order (its range
    wraps round the end), and it holds every request of the wave."""
    problem = shuffled_cp4
    wave = _one_wave(problem)
    chained = chained_wave(problem, wave, rotations=8)
    assert chained is not None and chained.fits(problem.memory_bytes)
    assert chained.cost_s < 0.98 * wave.cost_s
    assert chained.handoff.mode == "rounds" and chained.handoff.rounds == 2
    again = price_wave(problem, chained.items, chained.layout, chained.layout_name, owner=chained.owner)
    assert again.cost_s == pytest.approx(chained.cost_s, rel=1e-12)
    runs = np.flatnonzero(np.diff(chained.owner) != 0).size + 1
    assert runs > problem.topology.cp  # some rank holds two runs: the wrap
    assert sorted(chained.items) == sorted(wave.items)
    assert chained.layout.packed_tokens == wave.layout.packed_tokens


def test_nothing_chained_at_one_rank_zero_rotations_or_one_unit(qwen36, shuffled_cp4):
    """No chained version at CP1, at zero rotations, or for a wave of one unit (one prompt's group:
    nothing to take over)."""
    from cpplan.bench.synthetic import grpo

    wave = _one_wave(shuffled_cp4)
    assert chained_wave(shuffled_cp4, wave, rotations=0) is None
    two = grpo(num_prompts=2, group_size=8, system_tokens=0, prompt_tokens=4000, completion_tokens=600)
    one_rank = Problem.build(two, Settings(topology=Topology(cp=1), model=qwen36, memory_bytes=40 * 2**30))
    assert chained_wave(one_rank, _one_wave(one_rank), rotations=8) is None
    group = grpo(num_prompts=1, group_size=8, system_tokens=0, prompt_tokens=4000, completion_tokens=600)
    single = Problem.build(group, Settings(topology=Topology(cp=4), model=qwen36, memory_bytes=40 * 2**30))
    assert chained_wave(single, _one_wave(single), rotations=8) is None


def test_the_planner_proposes_the_chained_wave(qwen36):
    """Planned under the deterministic profile, shuffled GRPO groups at CP4 cost over 2% less with
    chained ranks than with ``moves.chain_rotations`` 0, and the verifier accepts the plan."""
    profile = cpplan.load_solver("deterministic")
    without = profile.model_copy(update={"moves": profile.moves.model_copy(update={"chain_rotations": 0})})
    kwargs = dict(topology=Topology(cp=4), model=qwen36, memory_bytes="40GiB")
    chained = cpplan.plan(grpo_shuffled(), solver=profile, **kwargs)
    plain = cpplan.plan(grpo_shuffled(), solver=without, **kwargs)
    assert chained.cost_s < 0.98 * plain.cost_s
    verdict = cpplan.verify(chained, grpo_shuffled(), **kwargs)
    assert verdict.valid and verdict.cost_s == pytest.approx(chained.cost_s, rel=1e-9)

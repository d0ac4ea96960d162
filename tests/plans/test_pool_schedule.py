"""Placing waves on the pool and replaying the schedule."""

from __future__ import annotations

from cpplan.plans.pool_schedule import block, place, pool_rank_waves, replay, sequential, units


def test_replay_starts_each_wave_when_its_gpus_are_free():
    """A wave on ranks 0-3 starts when both earlier waves on ranks 0-1 and 2-3 are done."""
    starts, makespan = replay([2.0, 1.0, 3.0], [(0, 1), (2, 3), (0, 1, 2, 3)], 4)
    assert starts == [0.0, 0.0, 2.0] and makespan == 5.0


def test_place_balances_and_its_order_replays_exactly():
    """Longest first, each on the block where it starts earliest: on two blocks of 2, waves of 5, 4,
    3, 3 end at 8 and 7 (round-robin would end at 8 and 7 too, but 5, 3, 3, 4 in order would not);
    the returned order replays to the same starts."""
    order, schedule = place([3.0, 5.0, 3.0, 4.0], [2, 2, 2, 2], 4, [None] * 4)
    assert order == [1, 3, 0, 2]
    assert schedule.makespan_s == 8.0
    costs = [[3.0, 5.0, 3.0, 4.0][w] for w in order]
    assert replay(costs, schedule.gpus, 4) == (list(schedule.start_s), schedule.makespan_s)


def test_split_waves_of_one_item_stay_together():
    """Consecutive split waves of one item are one placement unit, back to back on one block."""
    assert units([None, 7, 7, None, 7]) == [[0], [1, 2], [3], [4]]
    order, schedule = place([1.0, 2.0, 2.0, 1.0], [1, 1, 1, 1], 2, [None, 5, 5, None])
    assert order[:2] == [1, 2] and schedule.gpus[0] == schedule.gpus[1]


def test_sequential_and_pool_rank_order():
    """One group: waves one after another; a pool rank's waves in start order with its wave rank."""
    schedule = sequential([1.0, 2.0], 2)
    assert schedule.start_s == (0.0, 1.0) and schedule.makespan_s == 3.0
    gpus, starts = [block(2, 1), block(4, 0), block(1, 3)], [0.0, 5.0, 2.0]
    assert pool_rank_waves(gpus, starts, 3) == [(0, 1), (2, 0), (1, 3)]

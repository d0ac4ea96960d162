"""Equal waves per GPU in the schedule: padding waves priced at the per-wave cost, the makespan counting
them, placement that weighs them, and the verifier's own replay of them."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from cpplan.plans.pool_schedule import place, replay, timed, wave_counts
from cpplan.spec.topology import Topology
from cpplan.verifier.schedule_replay import replay_cost

PAD_S = 0.9
LONG_AND_SHORT = [10.0, 1.0, 1.0, 1.0, 1.0]
"""One long wave and four short ones on a pool of two single-GPU groups."""


def test_padding_fills_every_rank_to_the_busiest_count_and_is_paid():
    """One 10 s wave on GPU 0 and four 1 s waves on GPU 1: GPU 0 runs three empty waves of 0.9 s after
    its wave, so the makespan is 12.7 s, not the 10 s of the unequal schedule."""
    gpus = [(0,), (1,), (1,), (1,), (1,)]
    schedule = timed(LONG_AND_SHORT, gpus, 2, PAD_S)
    assert schedule.padding == (3, 0)
    assert math.isclose(schedule.makespan_s, 10.0 + 3 * PAD_S)
    unequal = timed(LONG_AND_SHORT, gpus, 2)
    assert unequal.padding is None and unequal.makespan_s == replay(LONG_AND_SHORT, gpus, 2)[1] == 10.0


def test_placement_weighs_padding_against_balance():
    """Without equal waves the longest-first placement puts the four short waves beside the long one
    (10 s); under equal waves that costs three padding waves (12.7 s), and the padding-aware placement
    moves short waves onto the long wave's GPU instead: 11.9 s."""
    order, unequal = place(LONG_AND_SHORT, [1] * 5, 2, [None] * 5)
    assert unequal.makespan_s == 10.0 and unequal.padding is None
    naive = timed([LONG_AND_SHORT[w] for w in order], unequal.gpus, 2, PAD_S)
    assert math.isclose(naive.makespan_s, 12.7)
    _, equal = place(LONG_AND_SHORT, [1] * 5, 2, [None] * 5, PAD_S)
    assert math.isclose(equal.makespan_s, 11.9) and equal.makespan_s < naive.makespan_s
    counts = wave_counts(equal.gpus, 2)
    assert len({n + p for n, p in zip(counts, equal.padding, strict=True)}) == 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(1.0, 20.0), st.sampled_from([1, 2, 4])), min_size=1, max_size=14),
    st.floats(0.0, 1.0),
)
def test_every_placement_gives_every_rank_the_same_number_of_waves(waves, pad_s):
    """For any waves of group sizes 1, 2 and 4 on a pool of 4, the padded placement gives every pool rank
    the same count of real plus padding waves, one rank no padding, and a makespan that is each rank's
    last finish plus its padding's seconds (never below the unpadded replay of the same order)."""
    costs, sizes = [c for c, _ in waves], [g for _, g in waves]
    order, schedule = place(costs, sizes, 4, [None] * len(costs), pad_s)
    counts = wave_counts(schedule.gpus, 4)
    totals = {n + p for n, p in zip(counts, schedule.padding, strict=True)}
    assert len(totals) == 1 and min(schedule.padding) == 0
    ordered = [costs[w] for w in order]
    starts, unpadded = replay(ordered, schedule.gpus, 4)
    finish = [0.0] * 4
    for cost, start, group in zip(ordered, starts, schedule.gpus, strict=True):
        for g in group:
            finish[g] = start + cost
    padded = max(f + p * pad_s for f, p in zip(finish, schedule.padding, strict=True))
    assert schedule.makespan_s == padded >= unpadded


def test_the_verifier_prices_the_padding_itself():
    """The verifier's replay of a plan claiming equal waves adds each rank's padding at the card's
    per-wave cost (12.7 s, where free padding would give 10 s) and refuses unequal totals, a padding
    wave priced off the card, and (where the topology requires equal waves) unequal counts without
    padding."""
    topology = Topology(cp=1, dp=2)
    waves = [{} for _ in LONG_AND_SHORT]
    gpus = [[0], [1], [1], [1], [1]]
    claim = {"waves": [3, 0], "wave_cost_s": PAD_S}
    found: list[str] = []
    cost = replay_cost(
        waves, gpus, list(LONG_AND_SHORT), topology, found, (claim, PAD_S), indices=list(range(len(waves)))
    )
    assert found == [] and math.isclose(cost, 12.7)
    unequal: list[str] = []
    replay_cost(
        waves,
        gpus,
        list(LONG_AND_SHORT),
        topology,
        unequal,
        ({**claim, "waves": [2, 0]}, PAD_S),
        indices=list(range(len(waves))),
    )
    assert any("claims equal waves" in v for v in unequal)
    off_card: list[str] = []
    replay_cost(
        waves,
        gpus,
        list(LONG_AND_SHORT),
        topology,
        off_card,
        ({**claim, "wave_cost_s": 0.0}, PAD_S),
        indices=list(range(len(waves))),
    )
    assert any("wave_cost_s" in v for v in off_card)
    missing: list[str] = []
    assert (
        replay_cost(
            waves,
            gpus,
            list(LONG_AND_SHORT),
            topology,
            missing,
            (None, PAD_S),
            indices=list(range(len(waves))),
        )
        == 10.0
    )
    assert any("requires equal waves" in v for v in missing)
    opted_out: list[str] = []
    replay_cost(
        waves,
        gpus,
        list(LONG_AND_SHORT),
        Topology(cp=1, dp=2, equal_waves=False),
        opted_out,
        indices=list(range(len(waves))),
    )
    assert opted_out == []


def test_equal_waves_is_on_exactly_when_the_pool_holds_several_groups():
    """``equal_waves`` resolves to on for ``dp > 1`` or dynamic CP, off for one group; an explicit choice
    wins, the text form says it only where it differs from that default, and a group size's topology
    keeps the pool's requirement."""
    assert Topology(cp=2, dp=2).needs_equal_waves and Topology(dp=1, cp=1, dynamic_cp=True).needs_equal_waves
    assert not Topology(cp=8).needs_equal_waves and Topology(cp=8, equal_waves=True).needs_equal_waves
    assert Topology(cp=2, dp=2) == Topology(cp=2, dp=2, equal_waves=True)
    opted_out = Topology.parse("cp=2,dp=2,equal_waves=0")
    assert not opted_out.needs_equal_waves and str(opted_out).endswith(",equal_waves=0")
    assert Topology.parse(str(opted_out)) == opted_out and "equal_waves" not in str(Topology(cp=2, dp=2))
    assert Topology(cp=2, dp=2, dynamic_cp=True).group(4).needs_equal_waves
    assert not opted_out.group(4).needs_equal_waves

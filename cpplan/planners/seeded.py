"""The ``seeded`` portfolio strategy: the baselines' wave groupings, priced and repaired exactly.

Each baseline packer (token budgets, no-sharing bins, zigzag, prefix groups) proposes which items run
together; every proposed wave becomes its cheapest fitting version: as the baseline laid it out and owned it
(Megatron's zigzag keeps pieces whole that the balanced split scatters), its layout under
:func:`~cpplan.pricing.wave.price_wave`'s ownership, or cpplan's own layouts. A wave that fits in none is
planned again by greedy. The cheapest seeded plan is returned; under a wall-clock budget a seed starts only
while the time left covers what the last one took. So a baseline plan that fits is never cheaper than the
portfolio's choice, and one that does not fit is repaired instead of running out of memory.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from cpplan.baselines import axolotl, megatron, prefix_grouper, trl, verl
from cpplan.baselines.base import Baseline
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import planned_waves
from cpplan.planners.subproblem import SubProblem
from cpplan.planners.widths import WidthSearch
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, best_wave, price_wave

# Cheapest and most often useful first: a time-limited run keeps the seeds it reached.
SEEDS: tuple[Baseline, ...] = (
    prefix_grouper.BASELINE,
    verl.BASELINE,
    axolotl.BASELINE,
    trl.BASELINE,
    megatron.BASELINE,
)


def repair(
    problem: Problem,
    proposal: Plan,
    layouts: Sequence[str],
    cache: dict | None = None,
    *,
    deadline: Deadline | None = None,
) -> Plan | None:
    """Every wave of ``proposal`` as its cheapest fitting version (as proposed, its layout under cpplan's
    ownership candidates, or cpplan's layouts), split where none fits. ``cache``
    keeps cpplan's own pricing of item sets already seen (seeds often propose the same waves). ``None``
    when ``deadline`` expires before every wave is repaired."""
    memory_bytes = problem.memory_bytes
    cache = {} if cache is None else cache
    waves: list[WavePlan] = []
    for wave in proposal.waves:
        if deadline is not None and deadline.expired():
            return None
        if wave.items not in cache:
            cache[wave.items] = best_wave(problem, wave.items, layouts)[0]
        own = cache[wave.items]
        theirs = price_wave(problem, wave.items, wave.layout, wave.layout_name, split=wave.split)
        choices = [w for w in (wave, theirs, own) if w is not None and w.fits(memory_bytes)]
        if choices:
            waves.append(min(choices, key=lambda w: w.cost_s))
        else:
            waves.extend(_refill(problem, wave.items, layouts))
    return Plan(strategy="seeded", waves=tuple(waves))


def _refill(problem: Problem, items: Sequence[int], layouts: Sequence[str]) -> list[WavePlan]:
    """The items of a wave that fits in neither version, planned again by greedy as a problem of their
    own (ascending, widest waves cut where the least is shared; an item too large for any wave takes
    the split path): a few pricings per wave, not one per item."""
    sub = SubProblem.of(problem, items)
    waves, _ = planned_waves(WidthSearch(problem=sub.problem, layouts=tuple(layouts)), None, final=True)
    return [sub.to_parent(wave) for wave in waves]


def seeded_plan(problem: Problem, layouts: Sequence[str], *, deadline: Deadline | None = None) -> Plan | None:
    """The cheapest repaired baseline plan. A seed is started only while ``deadline`` leaves as much
    time as the last seed took (the deadline's ``timing.seed_needs_s`` before the first: a
    baseline's proposal cannot be cut short), and its repair is abandoned once the deadline has
    expired; ``None`` when no seed was repaired in time. Without a deadline (or with a deterministic
    one, which never expires) every seed runs, so the answer is the same on every run."""
    cache: dict = {}
    plans = []
    expected_s = 0.0
    if deadline is not None and not deadline.deterministic:
        tokens = problem.logical_tokens(range(problem.num_items))
        expected_s = deadline.timing.seed_needs_s(problem.num_items, tokens)
    for seed in SEEDS:
        if deadline is not None and not deadline.can_finish(expected_s):
            break
        started = time.perf_counter()
        proposal = seed.plan(problem)
        repaired = repair(problem, proposal, layouts, cache, deadline=deadline)
        if repaired is not None:
            plans.append(repaired)
        expected_s = time.perf_counter() - started
    return min(plans, key=lambda p: p.cost_s) if plans else None

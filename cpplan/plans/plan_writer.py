"""Writing plan JSON: the contract's fields plus the layout and ownership that ``cpplan verify`` re-checks,
each object built from its field list in :mod:`~cpplan.plans.plan_fields`."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np

from cpplan.plans.plan import Candidate, Plan, SolverStats, repadded
from cpplan.plans.plan_fields import (
    CANDIDATE_FIELDS,
    HEADER_FIELDS,
    HEADER_OPTIONAL,
    PADDING_FIELDS,
    PLACEMENT_FIELDS,
    PLAN_FIELDS,
    PLAN_OPTIONAL,
    RANK_FIELDS,
    REQUEST_FIELDS,
    SOLVER_FIELDS,
    TIMING_FIELDS,
    WAVE_FIELDS,
    record,
)
from cpplan.plans.pool_schedule import Schedule, block, dp_rank_of, sequential, timed
from cpplan.pricing.evaluator import RankPrices, price, wave_cost_s
from cpplan.pricing.ownership import ChunkStats
from cpplan.pricing.wave import WavePlan
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.spec.workload_digest import workload_summary
from cpplan.version import cpplan_version


def wave_to_dict(
    result_problem,
    wave: WavePlan,
    index: int,
    *,
    gpus: tuple[int, ...] | None = None,
    start_s: float | None = None,
) -> dict[str, Any]:
    """One wave: items, its CP group size ``cp`` (with ``gpus``, its pool ranks, and ``start_s``, its
    start, when placed), layout segments, request chains and per-rank loads with breakdowns (each
    rank's ``card_peak_bytes`` and the wave's ``card_cost_s``: the card alone, no learned correction)."""
    problem = result_problem
    workload = problem.workload
    layout = wave.layout
    alone, alone_cost_s = card_alone_prices(problem, wave)
    ranks = _ranks(problem, wave, alone)
    item_ids = [workload.items[i].id for i in wave.items]
    placed = {} if gpus is None else {"gpus": list(gpus), "start_s": start_s}
    values = {
        "index": index,
        "dp_rank": _dp_rank(problem.topology.cp, index, problem.topology.dp, gpus),
        "cp": wave.cp,
        **placed,
        "items": item_ids,
        "layout": wave.layout_name,
        "split": wave.split,
        "packed_tokens": wave.packed_tokens,
        "logical_tokens": wave.logical_tokens,
        "cost_s": float(wave.cost_s),
        "card_cost_s": alone_cost_s,
        "gdn_handoff": wave.gdn_handoff,
        "segments": _segments(layout),
        "requests": _requests(problem, layout),
        "ranks": ranks,
    }
    return record(WAVE_FIELDS, values, optional=PLACEMENT_FIELDS)


def _requests(problem, layout) -> list[dict[str, Any]]:
    """The wave's requests: item id, index in the item and segment chain of each, in the layout's
    order (each object's fields in :data:`REQUEST_FIELDS` order)."""
    items = problem.workload.items
    tree_ids = layout.request_ids
    ptr, chains = layout.request_ptr.tolist(), layout.request_segments.tolist()
    item_ids = [items[i].id for i in problem.request_item[tree_ids].tolist()]
    indices = [int(k) for k in problem.request_index[tree_ids].tolist()]
    assert REQUEST_FIELDS == ("item", "request", "segments"), "each request below is written in this order"
    return [
        {"item": i, "request": k, "segments": chains[a:b]}
        for i, k, (a, b) in zip(item_ids, indices, itertools.pairwise(ptr), strict=True)
    ]


def _segments(layout) -> list[list[int]]:
    """The wave's segments as ``[parent, position, length]``."""
    columns = (layout.seg_parent, layout.seg_position, layout.seg_length)
    return [[int(p), int(s), int(n)] for p, s, n in zip(*(c.tolist() for c in columns), strict=True)]


def _ranks(problem, wave: WavePlan, alone: RankPrices) -> list[dict[str, Any]]:
    """Each CP rank of the wave: its owned ranges, local quantities and prices (``alone``: its prices
    by the card alone)."""
    card = problem.card.group_card(wave.cp)
    prices = wave.prices
    quantities = wave.quantities.tolist()
    ranges = _ranges_by_rank(wave.owner, wave.stats, wave.cp)
    breakdowns = _breakdowns(card, prices, wave.cp)
    peaks, card_peaks = prices.peak_bytes.tolist(), alone.peak_bytes.tolist()
    envelopes, times = prices.envelope.tolist(), prices.time_s.tolist()
    ranks = []
    for rank in range(wave.cp):
        entry: dict[str, Any] = {"rank": rank, "ranges": ranges[rank]}
        entry.update({name: round(quantities[rank][i]) for i, name in enumerate(QUANTITY_NAMES)})
        entry["peak_bytes"] = int(peaks[rank])
        entry["card_peak_bytes"] = int(card_peaks[rank])
        entry["envelope"] = card.envelope_names[int(envelopes[rank])]
        entry["breakdown"] = breakdowns[rank]
        entry["time_s"] = float(times[rank])
        ranks.append(record(RANK_FIELDS, entry))
    return ranks


def _ranges_by_rank(owner: np.ndarray, stats: ChunkStats, cp: int) -> list[list[list[int]]]:
    """Each rank's owned packed-token ranges ``[start, end)``, adjacent chunks merged (what
    :func:`~cpplan.pricing.ownership.owned_ranges` gives rank by rank), in one pass over the runs of
    chunks with one owner."""
    owner = np.asarray(owner).astype(np.int64, copy=False)
    ranges: list[list[list[int]]] = [[] for _ in range(cp)]
    if owner.size == 0:
        return ranges
    heads = np.flatnonzero(owner[1:] != owner[:-1]) + 1
    starts, ends = [0, *heads.tolist()], [*heads.tolist(), owner.size]
    chunk, packed = int(stats.chunk_tokens), int(stats.packed_tokens)
    for rank, start, end in zip(owner[starts].tolist(), starts, ends, strict=True):
        if 0 <= rank < cp:
            ranges[rank].append([start * chunk, min(end * chunk, packed)])
    return ranges


def _breakdowns(card, prices: RankPrices, cp: int) -> list[dict[str, int]]:
    """Each rank's ``breakdown`` (:meth:`~cpplan.pricing.evaluator.RankPrices.breakdown`'s figures, read
    from the arrays once)."""
    statics, members = card.envelope_static_bytes.tolist(), card.envelope_terms.tolist()
    envelopes, term_bytes = prices.envelope.tolist(), prices.term_bytes.tolist()
    breakdowns = []
    for rank in range(cp):
        e, row = int(envelopes[rank]), term_bytes[rank]
        parts = {"static": round(statics[e])}
        parts.update({card.term_names[t]: round(row[t]) for t, member in enumerate(members[e]) if member})
        breakdowns.append(parts)
    return breakdowns


def card_alone_prices(problem, wave: WavePlan) -> tuple[RankPrices, float]:
    """The wave's ranks and cost priced by the card alone (no learned correction): ``card_peak_bytes``
    and the wave's ``card_cost_s``."""
    card = problem.card.group_card(wave.cp)
    alone = problem.settings.card_alone.group_card(wave.cp)
    if alone is card:
        return wave.prices, float(wave.cost_s)
    prices = price(alone, wave.quantities)
    return prices, wave_cost_s(alone, prices) + wave.handoff.seconds / card.time_scale


def _dp_rank(cp: int, index: int, dp: int, gpus: tuple[int, ...] | None) -> int | None:
    """The data-parallel replica a wave runs on: the block of ``cp`` pool ranks holding its group
    (``None`` for a dynamic-CP group spanning replicas); round-robin for an unplaced wave."""
    if gpus is None:
        return dp_rank_of(index, dp)
    first, last = gpus[0] // cp, gpus[-1] // cp
    return first if first == last else None


def plan_schedule(problem, plan: Plan) -> Schedule:
    """Where and when each wave runs: the plan's own schedule; without one, one group after another
    (``dp = 1``), or waves dealt round-robin to the replicas (a plan made without a schedule under
    ``dp > 1``). Under equal waves the schedule pads every pool rank to the busiest one's count, each
    padding wave priced at the card's fixed per-wave cost."""
    topology = problem.topology
    padding_s = problem.card.wave_overhead_s if topology.needs_equal_waves else None
    if plan.schedule is not None:
        return repadded(plan, padding_s).schedule
    costs = [w.cost_s for w in plan.waves]
    if not topology.several_groups:
        return sequential(costs, topology.cp, padding_s)
    gpus = [block(topology.cp, w % topology.dp) for w in range(len(costs))]
    return timed(costs, gpus, topology.pool, padding_s)


def plan_header(problem, plan: Plan, schedule: Schedule | None = None) -> dict[str, Any]:
    """The plan JSON's fields before ``waves``: the settings it was priced under (their one JSON form,
    :meth:`Settings.to_json`; ``correction``: the learned correction the plan was priced with, ``None``
    for the card alone) and its totals. Under
    ``dp > 1`` or dynamic CP, ``cost_s`` is the schedule's makespan; otherwise the sum of the waves'
    costs."""
    settings = problem.settings.to_json()
    correction = settings.pop("correction")
    schedule = schedule or plan_schedule(problem, plan)
    cost_s = schedule.makespan_s if problem.topology.several_groups else plan.cost_s
    values = {
        "cpplan_version": cpplan_version(),
        **settings,
        "chunk_tokens": problem.chunk_tokens,
        "safety": problem.card.safety,
        "correction": correction,
        "strategy": plan.strategy,
        "cost_s": cost_s,
        "num_waves": plan.num_waves,
        "logical_tokens": plan.logical_tokens,
        "packed_tokens": plan.packed_tokens,
        "peak_bytes": plan.peak_bytes,
    }
    if problem.topology.needs_equal_waves:
        values["padding"] = padding_to_dict(schedule)
    return record(HEADER_FIELDS, values, optional=HEADER_OPTIONAL)


def padding_to_dict(schedule: Schedule) -> dict[str, Any]:
    """The ``padding`` object: each pool rank's empty waves and the seconds of one."""
    padding = schedule.padding if schedule.padding is not None else (0,) * schedule.pool
    return record(PADDING_FIELDS, {"waves": list(padding), "wave_cost_s": float(schedule.padding_s)})


def plan_to_dict(problem, plan: Plan) -> dict[str, Any]:
    """A plan alone (no portfolio information), as the verifier reads it."""
    schedule = plan_schedule(problem, plan)
    values = {**plan_header(problem, plan, schedule), "waves": _waves(problem, plan, schedule)}
    return record(PLAN_FIELDS, values, optional=PLAN_OPTIONAL)


def _waves(problem, plan: Plan, schedule: Schedule) -> list[dict[str, Any]]:
    """Every wave's JSON, placed by ``schedule``."""
    return [
        wave_to_dict(problem, w, i, gpus=schedule.gpus[i], start_s=schedule.start_s[i])
        for i, w in enumerate(plan.waves)
    ]


def wave_plan_dict(problem, plan: Plan, index: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Wave ``index`` of ``plan`` as a plan of its own (one wave, with its own totals, workload digest
    and its place in the plan's schedule): a shard line of ``cpplan pack``. ``extra`` goes before
    ``waves`` (the pack's position)."""
    wave = plan.waves[index]
    schedule = plan_schedule(problem, plan)
    data = wave_to_dict(problem, wave, index, gpus=schedule.gpus[index], start_s=schedule.start_s[index])
    header = plan_header(problem, plan, schedule)
    header.update(
        cost_s=float(wave.cost_s),
        num_waves=1,
        logical_tokens=wave.logical_tokens,
        packed_tokens=wave.packed_tokens,
        peak_bytes=int(wave.peak_bytes),
    )
    values = {**header, "workload": workload_summary(problem.workload, [data]), **extra, "waves": [data]}
    return record(PLAN_FIELDS, values, optional=PLAN_OPTIONAL)


def candidate_to_dict(candidate: Candidate) -> dict[str, Any]:
    """One portfolio candidate."""
    values = {
        "strategy": candidate.strategy,
        "cost_s": candidate.cost_s,
        "valid": candidate.valid,
        "reason": candidate.reason,
        "num_waves": candidate.num_waves,
        "wall_s": candidate.wall_s,
    }
    return record(CANDIDATE_FIELDS, values)


def solver_to_dict(stats: SolverStats) -> dict[str, Any]:
    """Solver statistics."""
    values = {
        "status": stats.status,
        "objective_s": stats.objective_s,
        "bound_s": stats.bound_s,
        "bound_scope": None if stats.bound_scope is None else stats.bound_scope.value,
        "gap": stats.gap,
        "model_gap": stats.model_gap,
        "wall_s": stats.wall_s,
        "deterministic_time": stats.deterministic_time,
        "num_booleans": stats.num_booleans,
        "num_integers": stats.num_integers,
        "num_constraints": stats.num_constraints,
        "ortools_version": stats.ortools_version,
        "stage_s": dict(stats.stage_s),
        "price_terms_s": dict(stats.price_terms_s),
        "outcomes": [outcome.to_dict() for outcome in stats.outcomes],
    }
    return record(SOLVER_FIELDS, values)


def full_plan_dict(
    problem,
    plan: Plan,
    *,
    profile: str,
    solver: SolverStats,
    candidates: tuple[Candidate, ...],
    wall_s: float,
) -> dict[str, Any]:
    """The full plan JSON of the contract (what :meth:`~cpplan.plans.result.PlanResult.to_dict`
    returns), with the ``workload`` digests that tell the workload it was made for."""
    schedule = plan_schedule(problem, plan)
    waves = _waves(problem, plan, schedule)
    summary = workload_summary(problem.workload, waves)
    values = {
        **plan_header(problem, plan, schedule),
        "workload": summary,
        "waves": waves,
        "profile": profile,
        "solver": solver_to_dict(solver),
        "candidates": [candidate_to_dict(c) for c in candidates],
        "wall_s": wall_s,
    }
    return record(PLAN_FIELDS, values, optional=("pack", *HEADER_OPTIONAL))


def dumps(data: dict[str, Any]) -> str:
    """Canonical JSON text (sorted keys are not used: field order is part of readability)."""
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def strip_timing(data: Any) -> Any:
    """A copy without wall-clock fields, for byte-for-byte comparisons of plans."""
    if isinstance(data, dict):
        return {k: strip_timing(v) for k, v in data.items() if k not in TIMING_FIELDS}
    if isinstance(data, list):
        return [strip_timing(v) for v in data]
    return data

"""Partition first: items assigned to DP replicas before packing, so each rank plans only its own share.

:func:`partition_items` assigns items to replicas from the workload alone, deterministically (nothing
depends on the clock, the process or Python's string hashing), and each replica's share is then a
``dp = 1`` problem at the same ``cp`` (:func:`replica_settings`): every item gets a quick price
(:meth:`StepDigests.prices_s`); items whose first requests share a prefix (hashes at :data:`PREFIX_LEVELS`)
stay in one replica while the group's price is within :data:`GROUP_SHARE` of an even share; groups go,
dearest first (ties by smallest id), to the least-loaded replica. :func:`assemble` puts the replicas'
plans back together as the step's plan, priced as a makespan (docs/runtime.md, "partition first").
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from cpplan.errors import InputError
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.subproblem import SubProblem, sub_workload
from cpplan.plans.plan import Plan
from cpplan.plans.pool_schedule import block, timed
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.card import ResolvedCard
from cpplan.spec.prefix_digest import PREFIX_LEVELS
from cpplan.spec.quantities import QUANTITIES
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload

GROUP_SHARE = 0.5
"""A prefix group stays in one replica while its price is at most this fraction of an even share
(the step's price over ``dp``); larger groups are split so the replicas can still be balanced."""


@dataclass(frozen=True, kw_only=True)
class ReplicaPartition:
    """Which DP replica plans each item of a workload, and the quick prices the split balanced."""

    num_replicas: int
    replica_of_item: tuple[int, ...]
    """Per workload item (in workload order), the replica that plans it."""
    item_price_s: tuple[float, ...]
    """Per workload item, its quick price in seconds (:meth:`StepDigests.prices_s`)."""
    num_groups: int
    """Prefix groups the items formed (each kept whole in one replica)."""

    def items(self, replica: int) -> tuple[int, ...]:
        """The workload indices of ``replica``'s items, in workload order."""
        return self._members[replica]

    @cached_property
    def _members(self) -> tuple[tuple[int, ...], ...]:
        """Every replica's items (workload indices, in workload order), sorted out once."""
        owner = np.asarray(self.replica_of_item, dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(self.num_replicas + 1))
        return tuple(tuple(order[a:b].tolist()) for a, b in itertools.pairwise(bounds))

    @property
    def replica_price_s(self) -> tuple[float, ...]:
        """Per replica, the sum of its items' quick prices."""
        return tuple(math.fsum(self.item_price_s[i] for i in members) for members in self._members)


def check_replica(replica: object, topology: Topology) -> int:
    """``replica`` as a replica index of ``topology`` (``0 <= replica < dp``), else an
    :class:`InputError` naming the field."""
    if isinstance(replica, bool) or not isinstance(replica, int | np.integer):
        raise InputError(f"must be a whole number, got {replica!r}", field="replica")
    if not 0 <= int(replica) < topology.dp:
        raise InputError(
            f"replica {int(replica)} is outside dp={topology.dp} (replicas 0 .. {topology.dp - 1})",
            field="replica",
        )
    if topology.dynamic_cp:
        raise InputError(
            "replicas are fixed CP groups: partitioned planning needs dynamic_cp off", field="replica"
        )
    return int(replica)


def replica_settings(settings: Settings) -> Settings:
    """``settings`` for one replica's share: the same card, memory and CP group, ``dp = 1`` (one group,
    nothing to equalize). The card prices a wave alike at any ``dp``, so a replica's priced waves are
    the step's."""
    topology = settings.topology.model_copy(update={"dp": 1, "equal_waves": False})
    return replace(settings, topology=topology)


@dataclass(frozen=True, kw_only=True)
class StepDigests:
    """The step's item digests (:mod:`cpplan.spec.prefix_digest`, computed when each item was
    validated) as arrays, in workload order: one attribute read per item, no token read."""

    first_tokens: np.ndarray
    """Per item, the length of its first request."""
    quick_tokens: np.ndarray
    """Per item, its quick packed tokens."""
    quick_pairs: np.ndarray
    """Per item, the attention pairs of those tokens."""
    level_hashes: np.ndarray
    """Per item (row) and level of :data:`PREFIX_LEVELS` (column), its first request's prefix hash."""

    @classmethod
    def of(cls, workload: Workload) -> StepDigests:
        """The digests of ``workload``'s items gathered."""
        digests = [item.prefix_digest for item in workload.items]
        count = len(digests)
        return cls(
            first_tokens=np.fromiter((d.first_tokens for d in digests), dtype=np.int64, count=count),
            quick_tokens=np.fromiter((d.quick_tokens for d in digests), dtype=np.float64, count=count),
            quick_pairs=np.fromiter((d.quick_pairs for d in digests), dtype=np.float64, count=count),
            level_hashes=np.frombuffer(b"".join(d.level_hashes for d in digests), dtype=np.uint64).reshape(
                count, len(PREFIX_LEVELS)
            ),
        )

    def prices_s(self, card: ResolvedCard, cp: int) -> np.ndarray:
        """Per item, quick seconds: ``(a * tokens + b * pairs) / cp`` with the item's quick packed
        tokens and pairs and ``a`` / ``b`` the card's seconds per owned token / pair (a balance price,
        not the evaluator's)."""
        per_token, per_pair = _token_and_pair_s(card)
        return (per_token * self.quick_tokens + per_pair * self.quick_pairs) / cp


def level_prices_s(card: ResolvedCard, cp: int) -> np.ndarray:
    """Per level of :data:`PREFIX_LEVELS`, the quick seconds of a prefix that long (as
    :meth:`StepDigests.prices_s` prices tokens): what a group saves per member beyond its first that
    shares it."""
    per_token, per_pair = _token_and_pair_s(card)
    levels = np.array(PREFIX_LEVELS, dtype=np.float64)
    return (per_token * levels + per_pair * levels * (levels + 1) / 2) / cp


def _token_and_pair_s(card: ResolvedCard) -> tuple[float, float]:
    """The card's seconds per owned token and per attention pair."""
    coefficients = card.constants.time_coefficients
    per_token = math.fsum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "token")
    per_pair = math.fsum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "pair")
    return per_token, per_pair


def prefix_groups(
    workload: Workload, prices: np.ndarray, cap_s: float, level_s: np.ndarray | None = None
) -> list[list[int]]:
    """Items (workload indices) grouped by shared prefix of their first requests: at every level of
    :data:`PREFIX_LEVELS`, longest first, the groups of items with one prefix hash merge when their
    price together is at most ``cap_s``: their prices summed, less the level's price (``level_s``, per
    level; none when not given) for every group beyond the first, since the merged group stores that
    prefix once. Groups are listed by smallest item id, each in id order."""
    step = StepDigests.of(workload)
    level_s = np.zeros(len(PREFIX_LEVELS)) if level_s is None else level_s
    return _grouped(_id_ranks(workload), step.first_tokens, step.level_hashes, prices, cap_s, level_s)[0]


def _id_ranks(workload: Workload) -> np.ndarray:
    """Per item, its place among the items sorted by id."""
    ids = [item.id for item in workload.items]
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids), dtype=np.int64)
    return ranks


def _grouped(
    ranks: np.ndarray,
    first_len: np.ndarray,
    hashes: np.ndarray,
    prices: np.ndarray,
    cap_s: float,
    level_s: np.ndarray,
) -> tuple[list[list[int]], list[float]]:
    """:func:`prefix_groups` and each group's price, from the items' id ranks (:func:`_id_ranks`),
    first-request lengths and level hashes: a union-find over the shared buckets alone (Python per item
    of a shared bucket, none for an item that shares no prefix)."""
    by_id = np.argsort(ranks)
    reached = first_len[:, None] >= np.array(PREFIX_LEVELS, dtype=np.int64)[None, :]
    columns = _repeated_columns(hashes, reached)
    price = prices.tolist()
    if not columns:
        return [[i] for i in by_id.tolist()], [price[i] for i in by_id.tolist()]
    root = list(range(ranks.size))
    order = ranks.tolist()

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for column in columns:
        for members in _shared(by_id[reached[by_id, column]], hashes[:, column]):
            roots = sorted({find(i) for i in members}, key=order.__getitem__)
            merged = math.fsum(price[r] for r in roots) - (len(roots) - 1) * float(level_s[column])
            if len(roots) > 1 and merged <= cap_s:
                for r in roots[1:]:
                    root[r] = roots[0]
                price[roots[0]] = merged
    final = np.array([find(i) for i in range(ranks.size)], dtype=np.int64)
    members = np.lexsort((ranks, ranks[final])).tolist()
    bounds = [0, *(np.flatnonzero(np.diff(final[members])) + 1).tolist(), len(members)]
    groups = [members[a:b] for a, b in itertools.pairwise(bounds)]
    return groups, [price[int(final[g[0]])] for g in groups]


def _repeated_columns(hashes: np.ndarray, reached: np.ndarray) -> list[int]:
    """The columns (levels) where two items that reach the level may share a hash, found with one sort:
    a level that no two items share needs no bucket (an item that does not reach a level stands in with
    its own index, so a real hash equal to it only costs that level's exact look)."""
    columns = np.flatnonzero(reached.sum(axis=0) >= 2)
    stand_in = np.arange(hashes.shape[0], dtype=np.uint64)[None, :]
    ordered = np.sort(np.where(reached[:, columns].T, hashes[:, columns].T, stand_in), axis=1)
    return columns[(ordered[:, 1:] == ordered[:, :-1]).any(axis=1)].tolist()


def _shared(candidates: np.ndarray, column: np.ndarray) -> list[list[int]]:
    """The items of ``candidates`` (in id order) that share a hash of ``column`` with another, one list
    per shared hash (each in id order; lists by their first member's place in ``candidates``)."""
    if candidates.size < 2:
        return []
    values = column[candidates]
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        return []
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    sizes = np.diff(np.append(starts, values.size))
    shared = starts[sizes > 1]
    ends = shared + sizes[sizes > 1]
    members = candidates[order].tolist()
    buckets = [members[a:b] for a, b in zip(shared.tolist(), ends.tolist(), strict=True)]
    return [buckets[k] for k in np.argsort(order[shared], kind="stable").tolist()]


def partition_items(
    workload: Workload, card: ResolvedCard, topology: Topology, *, prefix_once: bool = True
) -> ReplicaPartition:
    """Assign every item of ``workload`` to one of ``topology.dp`` replicas (this module's docstring): prefix
    groups, then longest processing time first on the quick prices. Every replica gets an item when there are
    at least ``dp`` items (groups are given up, item by item, if they would leave one without).
    ``prefix_once``: a group's price stores its shared prefix once (:func:`prefix_groups`' ``level_s``);
    otherwise it is its items' prices summed, every member paying for its own copy."""
    dp = topology.dp
    step = StepDigests.of(workload)
    prices = step.prices_s(card, topology.cp)
    listed = prices.tolist()
    ranks = _id_ranks(workload)
    if dp > 1:
        level_s = level_prices_s(card, topology.cp) if prefix_once else np.zeros(len(PREFIX_LEVELS))
        cap_s = GROUP_SHARE * math.fsum(listed) / dp
        groups, group_s = _grouped(ranks, step.first_tokens, step.level_hashes, prices, cap_s, level_s)
    else:
        groups, group_s = [list(range(len(listed)))], [math.fsum(listed)]
    if len(groups) < dp <= workload.num_items:
        groups = [[i] for group in groups for i in group]
        group_s = [listed[g[0]] for g in groups]
    replica_of = longest_first(groups, group_s, ranks, dp)
    return ReplicaPartition(
        num_replicas=dp,
        replica_of_item=tuple(replica_of.tolist()),
        item_price_s=tuple(listed),
        num_groups=len(groups),
    )


def longest_first(
    groups: list[list[int]], group_price: list[float], ranks: np.ndarray, dp: int
) -> np.ndarray:
    """Per item, its replica: ``groups`` (of item indices) by decreasing price (``group_price``; ties by
    smallest id, ``ranks`` being the items' places in id order), each to the replica with the least price
    so far (ties to the lowest replica)."""
    leaders = np.array([g[0] for g in groups], dtype=np.int64)
    order = np.lexsort((ranks[leaders], -np.array(group_price, dtype=np.float64))).tolist()
    least = [(0.0, r) for r in range(dp)]  # a heap of (load, replica): the least loaded, lowest first
    target = [0] * len(groups)
    replace = heapq.heapreplace
    for g in order:
        load, r = least[0]
        replace(least, (load + group_price[g], r))
        target[g] = r
    replica_of = np.empty(ranks.size, dtype=np.int64)
    if leaders.size == ranks.size:  # every group one item
        replica_of[leaders] = target
    else:
        sizes = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
        replica_of[np.fromiter(itertools.chain.from_iterable(groups), dtype=np.int64)] = np.repeat(
            target, sizes
        )
    return replica_of


def replica_workload(workload: Workload, items: Sequence[int], replica: int) -> Workload:
    """The sub-workload of ``items`` (workload indices, in workload order), source lines kept; an empty
    share is an :class:`InputError` (fewer items than replicas)."""
    if not items:
        raise InputError(
            f"replica {replica} has no items: the step has {workload.num_items} items, fewer than the "
            "replicas that need a share",
            field="replica",
        )
    return sub_workload(workload, items)


def assemble(
    step: Problem, partition: ReplicaPartition, plans: Sequence[Plan], replica_problems: Sequence[Problem]
) -> Plan:
    """The step's plan from every replica's plan (in replica order): replica ``k``'s waves, mapped to the
    step's items, on pool block ``k``; under equal waves every GPU padded to the busiest replica's wave
    count at the card's per-wave cost. The plan's strategy is the weakest replica's (``full_sharing``
    before ``greedy`` before the rest); its notes name each replica's."""
    cp = step.topology.cp
    waves: list[WavePlan] = []
    gpus: list[tuple[int, ...]] = []
    notes: list[str] = []
    for k, (plan, sub) in enumerate(zip(plans, replica_problems, strict=True)):
        items = partition.items(k)
        waves.extend(map(SubProblem.over(step, sub, items).to_parent, plan.waves))
        gpus.extend([block(cp, k)] * plan.num_waves)
        notes.extend(f"replica {k}: {note}" for note in plan.notes)
    padding_s = step.card.wave_overhead_s if step.topology.needs_equal_waves else None
    schedule = timed([w.cost_s for w in waves], gpus, step.topology.pool, padding_s)
    strategies = [plan.strategy for plan in plans]
    weakest = next((s for s in ("full_sharing", "greedy") if s in strategies), strategies[0])
    return Plan(strategy=weakest, waves=tuple(waves), schedule=schedule, notes=tuple(notes))


def partitioned_greedy_plans(
    problem: Problem, layouts: Sequence[str], deadline: Deadline | None = None
) -> list[Plan]:
    """``problem``'s step partitioned over its CP groups (:func:`partition_items`) with a group's shared
    prefix priced once, then once per member, each share planned by greedy as a ``dp = 1`` problem and
    assembled (:func:`planned_partition`): prefix groups stay whole, however shuffled they arrive. One
    plan per distinct partition (one where the two split the items alike)."""
    partitions: dict[tuple[int, ...], ReplicaPartition] = {}
    for once in (True, False):
        partition = partition_items(problem.workload, problem.card, problem.topology, prefix_once=once)
        partitions.setdefault(partition.replica_of_item, partition)
    return [planned_partition(problem, p, layouts, deadline) for p in partitions.values()]


def planned_partition(
    problem: Problem, partition: ReplicaPartition, layouts: Sequence[str], deadline: Deadline | None = None
) -> Plan:
    """Each replica's share of ``partition`` planned by greedy as a ``dp = 1`` problem, assembled."""
    workload, settings = problem.workload, replica_settings(problem.settings)
    shares = [replica_workload(workload, partition.items(k), k) for k in range(partition.num_replicas)]
    problems = [Problem.build(s, settings, checked=True, reorder_waves=problem.reorder_waves) for s in shares]
    plans = [cached_greedy_plan(sub, layouts, deadline) for sub in problems]
    return assemble(problem, partition, plans, problems)

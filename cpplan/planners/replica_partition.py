"""Partition first: items assigned to DP replicas before packing, so each rank plans only its own share.

Under ``dp > 1`` every DP replica (a CP group of ``cp`` ranks) runs its own waves. Planning the whole
step jointly costs every rank the whole step's search; instead :func:`partition_items` assigns items to
replicas from the workload alone, deterministically and cheaply, and each replica's share is then a
``dp = 1`` problem at the same ``cp`` (:func:`replica_settings`), planned on its own. Every rank that
partitions the same workload gets the same assignment (nothing depends on the clock, the process or
Python's string hashing), so a rank can plan its share and know that the others plan theirs from the
same split.

The partition:

- **price**: every item gets a quick price in seconds (:func:`item_prices_s`): its packed tokens and
  attention pairs under full sharing of its own requests' common prefixes, times the card's per-token
  and per-pair seconds, over ``cp`` ranks. No prefix tree is built: each request is compared with the
  item's first one;
- **prefix groups**: items whose first requests share a prefix (detected by prefix hashes at the
  lengths of :data:`PREFIX_LEVELS`, longest first) are kept in one replica while the group's price stays
  within :data:`GROUP_SHARE` of one replica's even share; a prefix shared more widely (a system prompt
  of every item) is stored once per replica instead;
- **balance**: groups by decreasing price (ties by smallest item id), each to the replica with the
  least price so far (ties to the lowest replica): longest processing time first. Items are compared
  by id, so the assignment of ids to replicas does not depend on the order items arrive in.

:func:`assemble` puts the replicas' plans back together as the step's plan: replica ``k``'s waves on
pool ranks ``k * cp .. k * cp + cp - 1``, every GPU padded to the busiest replica's wave count under
equal waves (FSDP's equal-collectives rule), priced as a makespan.
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
from cpplan.plans.plan import Plan
from cpplan.plans.pool_schedule import block, timed
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import QUANTITIES
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload

PREFIX_LEVELS = (32768, 16384, 8192, 4096, 2048, 1024, 512, 256, 128)
"""Prefix lengths (tokens, multiples of :data:`PREFIX_STRIDE`) at which items' first requests are
compared, longest first."""

GROUP_SHARE = 0.5
"""A prefix group stays in one replica while its price is at most this fraction of an even share
(the step's price over ``dp``); larger groups are split so the replicas can still be balanced."""

_HASH_SEED = 0x5EED_C0DE
"""Seed of the fixed per-position multipliers of the prefix hash (the same in every process)."""


@dataclass(frozen=True, kw_only=True)
class ReplicaPartition:
    """Which DP replica plans each item of a workload, and the quick prices the split balanced."""

    num_replicas: int
    replica_of_item: tuple[int, ...]
    """Per workload item (in workload order), the replica that plans it."""
    item_price_s: tuple[float, ...]
    """Per workload item, its quick price in seconds (:func:`item_prices_s`)."""
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
        sums: list[list[float]] = [[] for _ in range(self.num_replicas)]
        for price, r in zip(self.item_price_s, self.replica_of_item, strict=True):
            sums[r].append(price)
        return tuple(math.fsum(s) for s in sums)


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


PREFIX_STRIDE = 64
"""Prefixes are compared, and hashed, on every this many-th token (a balance price needs no more)."""


def item_prices_s(workload: Workload, card: ResolvedCard, cp: int) -> np.ndarray:
    """Per item, quick seconds: ``(a * tokens + b * pairs) / cp`` with ``tokens`` the item's packed
    tokens when each request shares a prefix with the item's first request, ``pairs`` the attention
    pairs of those tokens (a token at position ``p`` attends ``p + 1`` keys), and ``a`` / ``b`` the card's
    seconds per owned token / pair (every per-token and per-pair term, as if every token took gradients
    and loss: a balance price, not the evaluator's). Only each item's second request is compared with
    its first (:func:`sampled_prefixes`); every later request is taken to share as much (at most its own
    length), as a GRPO group's completions share their prompt and an agent's turns their history. So
    the token reads are one per item, and a request costs only its length."""
    coefficients = card.constants.time_coefficients
    per_token = math.fsum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "token")
    per_pair = math.fsum(float(coefficients[k]) for k, q in enumerate(QUANTITIES) if q.count == "pair")
    size = workload.num_items
    first_len = np.array([item.requests[0].tokens.size for item in workload.items], dtype=np.float64)
    second_owner, second_len, second_common = sampled_prefixes(workload, max_requests=2)
    shared = np.zeros(size, dtype=np.int64)
    shared[second_owner] = second_common
    later = [(i, r.tokens.size) for i, item in enumerate(workload.items) for r in item.requests[2:]]
    later_owner = np.array([i for i, _ in later], dtype=np.int64)
    later_len = np.array([n for _, n in later], dtype=np.int64)
    owners = np.concatenate([second_owner, later_owner])
    n = np.concatenate([second_len, later_len]).astype(np.float64)
    c = np.concatenate([second_common, np.minimum(shared[later_owner], later_len)]).astype(np.float64)
    tokens = first_len + np.bincount(owners, weights=n - c, minlength=size)
    pairs = first_len * (first_len + 1) / 2
    pairs += np.bincount(owners, weights=(n * (n + 1) - c * (c + 1)) / 2, minlength=size)
    return (per_token * tokens + per_pair * pairs) / cp


def sampled_prefixes(
    workload: Workload, *, max_requests: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every request but each item's first (``max_requests``: of each item's first that many only):
    its item, its length, and the length of the prefix it shares with its item's first request, found on
    every :data:`PREFIX_STRIDE`-th token in one vectorized pass over the workload. For requests that
    share a prefix and then go their own ways the answer is within half a stride of the exact one (the
    middle of the stride where they part); two that differ only between sampled tokens count as sharing
    them."""
    stride = PREFIX_STRIDE
    firsts, first_len, heads, owners, lengths = [], [], [], [], []
    for i, item in enumerate(workload.items):
        first = item.requests[0].tokens
        firsts.append(first[::stride])
        first_len.append(first.size)
        for request in item.requests[1:max_requests]:
            heads.append(request.tokens[: first.size : stride])
            owners.append(i)
            lengths.append(request.tokens.size)
    owner = np.array(owners, dtype=np.int64)
    length = np.array(lengths, dtype=np.int64)
    if not heads:
        return owner, length, np.zeros(0, dtype=np.int64)
    counts = np.array([h.size for h in heads], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    first_at = np.concatenate([[0], np.cumsum([f.size for f in firsts])[:-1]])
    position = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
    reference = np.concatenate(firsts)[np.repeat(first_at[owner], counts) + position]
    parted = np.concatenate(heads) != reference
    unparted = np.iinfo(np.int64).max
    first_parted = np.full(owner.size, unparted, dtype=np.int64)
    some = counts > 0
    if some.any():
        marks = np.where(parted, position, unparted)
        first_parted[some] = np.minimum.reduceat(marks, starts[some])
    span = np.minimum(length, np.array(first_len, dtype=np.int64)[owner])
    estimate = np.maximum(0, first_parted * stride - stride // 2)
    common = np.where(first_parted == unparted, span, np.minimum(estimate, span))
    return owner, length, common


def prefix_hashes(tokens: np.ndarray, levels: Sequence[int]) -> dict[int, int]:
    """A 64-bit hash of ``tokens[:L]`` for every ``L`` of ``levels`` (multiples of
    :data:`PREFIX_STRIDE`) that ``tokens`` reaches: the sum of every :data:`PREFIX_STRIDE`-th token times
    a fixed pseudo-random multiplier of its place, modulo ``2**64`` (the same in every process)."""
    reach = [level for level in levels if level <= tokens.size]
    if not reach:
        return {}
    sampled = tokens[: max(reach) : PREFIX_STRIDE]
    sums = np.cumsum(sampled.astype(np.uint64) * _multipliers()[: sampled.size], dtype=np.uint64)
    return {level: int(sums[level // PREFIX_STRIDE - 1]) for level in reach}


def level_hashes(firsts: Sequence[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """Per item (row) and level of :data:`PREFIX_LEVELS` (column), :func:`prefix_hashes` of its first
    request, from ``firsts`` (every :data:`PREFIX_STRIDE`-th token of each item's first request) and
    ``lengths`` (their full lengths); ``0`` where the request does not reach the level. One vectorized
    pass over every item: the per-item hash sums are differences of one running sum, modulo ``2**64``."""
    cap = max(PREFIX_LEVELS) // PREFIX_STRIDE
    heads = [f[:cap] for f in firsts]
    counts = np.array([h.size for h in heads], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    position = np.arange(int(starts[-1]), dtype=np.int64) - np.repeat(starts[:-1], counts)
    sampled = np.concatenate(heads).astype(np.uint64) if heads else np.zeros(0, dtype=np.uint64)
    running = np.zeros(sampled.size + 1, dtype=np.uint64)
    np.cumsum(sampled * _multipliers()[position], dtype=np.uint64, out=running[1:])
    hashes = np.zeros((len(firsts), len(PREFIX_LEVELS)), dtype=np.uint64)
    for column, level in enumerate(PREFIX_LEVELS):
        reached = lengths >= level
        ends = starts[:-1][reached] + level // PREFIX_STRIDE
        hashes[reached, column] = running[ends] - running[starts[:-1][reached]]
    return hashes


def _multipliers() -> np.ndarray:
    """The position multipliers of the prefix hash, one per sampled place up to the longest level: odd
    64-bit integers from a fixed seed, drawn anew on every call (a few microseconds; no module-level
    cache, by the caching rule)."""
    rng = np.random.default_rng(_HASH_SEED)
    size = max(PREFIX_LEVELS) // PREFIX_STRIDE
    return rng.integers(0, 2**63, size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def prefix_groups(
    workload: Workload, prices: np.ndarray, cap_s: float, hashes: np.ndarray | None = None
) -> list[list[int]]:
    """Items (workload indices) grouped by shared prefix of their first requests: at every level of
    :data:`PREFIX_LEVELS`, longest first, the groups of items with one prefix hash merge when their
    prices sum to at most ``cap_s``. Groups are listed by smallest item id, each in id order.
    ``hashes``: :func:`level_hashes` of the items (computed here when not given)."""
    ids = [item.id for item in workload.items]
    by_id = np.array(sorted(range(workload.num_items), key=ids.__getitem__), dtype=np.int64)
    lengths = _first_lengths(workload)
    if hashes is None:
        hashes = level_hashes([item.requests[0].tokens[::PREFIX_STRIDE] for item in workload.items], lengths)
    root = list(range(workload.num_items))
    price = [float(p) for p in prices]

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for column, level in enumerate(PREFIX_LEVELS):
        for members in _shared(by_id[lengths[by_id] >= level], hashes[:, column]):
            roots = sorted({find(i) for i in members}, key=ids.__getitem__)
            if len(roots) > 1 and math.fsum(price[r] for r in roots) <= cap_s:
                for r in roots[1:]:
                    root[r] = roots[0]
                price[roots[0]] = math.fsum(price[r] for r in roots)
    groups: dict[int, list[int]] = {}
    for i in by_id.tolist():
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: ids[g[0]])


def _first_lengths(workload: Workload) -> np.ndarray:
    """Per item, the length of its first request."""
    return np.array([item.requests[0].tokens.size for item in workload.items], dtype=np.int64)


def _shared(candidates: np.ndarray, column: np.ndarray) -> list[list[int]]:
    """The items of ``candidates`` (in id order) that share a hash of ``column`` with another, one list
    per shared hash (each in id order; lists by their first member's place in ``candidates``)."""
    if candidates.size < 2:
        return []
    values = column[candidates]
    _, first, inverse, counts = np.unique(values, return_index=True, return_inverse=True, return_counts=True)
    shared = counts[inverse] > 1
    if not shared.any():
        return []
    buckets: dict[int, list[int]] = {}
    for at, i in zip(inverse[shared].tolist(), candidates[shared].tolist(), strict=True):
        buckets.setdefault(at, []).append(i)
    return [buckets[at] for at in sorted(buckets, key=first.__getitem__)]


def partition_items(workload: Workload, card: ResolvedCard, topology: Topology) -> ReplicaPartition:
    """Assign every item of ``workload`` to one of ``topology.dp`` replicas (this module's docstring):
    prefix groups, then longest processing time first on the quick prices. Every replica gets an item
    when there are at least ``dp`` items (groups are given up, item by item, if they would leave one
    without)."""
    dp = topology.dp
    prices = item_prices_s(workload, card, topology.cp)
    total = math.fsum(prices.tolist())
    groups = (
        prefix_groups(workload, prices, GROUP_SHARE * total / dp) if dp > 1 else [list(range(len(prices)))]
    )
    if len(groups) < dp <= workload.num_items:
        groups = [[i] for group in groups for i in group]
    ids = [item.id for item in workload.items]
    group_price = [math.fsum(prices[i] for i in group) for group in groups]
    order = sorted(range(len(groups)), key=lambda g: (-group_price[g], ids[groups[g][0]]))
    least = [(0.0, r) for r in range(dp)]  # a heap of (load, replica): the least loaded, lowest first
    replica_of = [0] * workload.num_items
    for g in order:
        load, target = least[0]
        heapq.heapreplace(least, (load + group_price[g], target))
        for i in groups[g]:
            replica_of[i] = target
    return ReplicaPartition(
        num_replicas=dp,
        replica_of_item=tuple(replica_of),
        item_price_s=tuple(float(p) for p in prices),
        num_groups=len(groups),
    )


def replica_workload(workload: Workload, items: Sequence[int], replica: int) -> Workload:
    """The sub-workload of ``items`` (workload indices, in workload order), source lines kept; an empty
    share is an :class:`InputError` (fewer items than replicas)."""
    if not items:
        raise InputError(
            f"replica {replica} has no items: the step has {workload.num_items} items, fewer than the "
            "replicas that need a share",
            field="replica",
        )
    lines = None if workload.lines is None else tuple(workload.lines[i] for i in items)
    return Workload(
        items=tuple(workload.items[i] for i in items),
        source=workload.source,
        lines=lines,
        token_ids=workload.token_ids,
    )


def to_step_wave(
    wave: WavePlan, items: Sequence[int], item_ptr: np.ndarray, replica_ptr: np.ndarray
) -> WavePlan:
    """A replica's priced wave as the same wave of the whole step: its items mapped to workload indices
    (``items``), its tree requests to the step's (a request is its item's first request plus its index
    in the item: ``item_ptr`` of the step, ``replica_ptr`` of the replica's problem)."""
    local = np.asarray(wave.items, dtype=np.int64)
    step_items = np.asarray(items, dtype=np.int64)

    def mapped(requests: np.ndarray) -> np.ndarray:
        requests = np.asarray(requests, dtype=np.int64)
        owner = np.searchsorted(replica_ptr, requests, side="right") - 1
        return item_ptr[step_items[owner]] + (requests - replica_ptr[owner])

    layout = replace(
        wave.layout, request_ids=mapped(wave.layout.request_ids), seg_src=mapped(wave.layout.seg_src)
    )
    return replace(wave, items=tuple(step_items[local].tolist()), layout=layout)


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
        waves.extend(to_step_wave(w, items, step.item_ptr, sub.item_ptr) for w in plan.waves)
        gpus.extend([block(cp, k)] * plan.num_waves)
        notes.extend(f"replica {k}: {note}" for note in plan.notes)
    padding_s = step.card.wave_overhead_s if step.topology.needs_equal_waves else None
    schedule = timed([w.cost_s for w in waves], gpus, step.topology.pool, padding_s)
    strategies = [plan.strategy for plan in plans]
    weakest = next((s for s in ("full_sharing", "greedy") if s in strategies), strategies[0])
    return Plan(strategy=weakest, waves=tuple(waves), schedule=schedule, notes=tuple(notes))

"""The cpplan half of the side-by-side with ART's TrainerRank layout selection
(``benchmarks/bench_seed_peer.py``): nothing here imports ART.

ART chooses a layout per *canonical tree*, the radix tree of the sequences of one forward call: a
decision is a maximal span shared by the same set of sequences, identified here by that set and the
span's end position. cpplan's layout is a mask over the nodes of the step's prefix tree (finer than one
wave's tree: other waves' requests split nodes further). An ART decision maps onto the cpplan node of
its sequences' path that ends where the decision ends: a request's copy of a node is the copy of the
nearest shared node at or below it, so sharing that node shares the decision's whole span, exactly as
ART lays it out. The other way, a cpplan layout becomes the segments ART's score reads (start, end,
the sequences through it); it is an ART decision set only when every shared segment ends where a
canonical segment ends (``min_span`` can share part of a span, which ART cannot express).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.bench import synthetic
from cpplan.bench.suites import Case
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.problem import Problem
from cpplan.pricing.tree import PrefixTree
from cpplan.pricing.wave import WavePlan
from cpplan.spec.quantities import QUANTITIES


@dataclass(frozen=True, kw_only=True)
class SegmentView:
    """One packed segment as ART's score and GDN bucket schedule read it: tokens ``[start, end)`` of
    the wave requests ``sequence_indices`` (positions in the wave), packed from ``packed_start``, under
    segment ``parent`` (-1 for a root)."""

    index: int
    start: int
    end: int
    sequence_indices: tuple[int, ...]
    parent: int
    packed_start: int

    @property
    def length(self) -> int:
        """Tokens in the segment."""
        return self.end - self.start

    @property
    def group_id(self) -> int:
        """The segment's identity in ART's GDN bucket schedule."""
        return self.index

    @property
    def parent_id(self) -> int:
        """The parent's identity; a root is its own parent there."""
        return self.index if self.parent < 0 else self.parent


@dataclass(frozen=True, kw_only=True)
class LayoutView:
    """A cpplan packed layout with the fields ART's ``prefix_tree_layout_score`` reads."""

    segments: tuple[SegmentView, ...]
    packed_tokens: int
    maximum_depth: int
    selected_decisions: frozenset[int]

    @property
    def signature(self) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
        """The segments as (start, end, sequences), sorted: equal for layouts that pack alike."""
        return tuple(sorted((s.start, s.end, s.sequence_indices) for s in self.segments))


def layout_view(layout: PackedLayout, decisions: frozenset[int] = frozenset()) -> LayoutView:
    """``layout`` as the segments ART prices; ``decisions``: its ART decision set, where known."""
    members: list[list[int]] = [[] for _ in range(layout.num_segments)]
    depth = 0
    for k in range(layout.request_ids.size):
        chain = layout.chain(k)
        depth = max(depth, int(chain.size))
        for s in chain.tolist():
            members[s].append(k)
    segments = tuple(
        SegmentView(
            index=s,
            start=int(layout.seg_position[s]),
            end=int(layout.seg_position[s] + layout.seg_length[s]),
            sequence_indices=tuple(members[s]),
            parent=int(layout.seg_parent[s]),
            packed_start=int(layout.seg_offset[s]),
        )
        for s in range(layout.num_segments)
    )
    return LayoutView(
        segments=segments,
        packed_tokens=layout.packed_tokens,
        maximum_depth=depth,
        selected_decisions=decisions,
    )


def wave_sequences(problem: Problem, items: Sequence[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The tree request indices of a wave's items and their token sequences, in wave order (ART's
    sequence ``k`` is request ``requests[k]``)."""
    requests = problem.item_requests(items)
    return requests, [problem.tree.sequences[int(r)] for r in requests]


def node_ending_at(tree: PrefixTree, request: int, end: int) -> int:
    """The node on ``request``'s path whose span ends at token position ``end``."""
    for v in tree.path(request):
        if int(tree.node_start[v] + tree.node_length[v]) == end:
            return int(v)
    raise AssertionError(f"no node of request {request} ends at {end}")


def decisions_mask(
    problem: Problem, requests: np.ndarray, canonical: Sequence[object], decisions: frozenset[int]
) -> np.ndarray:
    """cpplan's node mask for ART decisions ``decisions`` (indices into ``canonical``, the canonical
    segments, each with ``sequence_indices`` and ``end``) on the wave of tree requests ``requests``."""
    mask = np.zeros(problem.tree.num_nodes, dtype=bool)
    for d in sorted(decisions):
        segment = canonical[d]
        first = int(requests[segment.sequence_indices[0]])
        mask[node_ending_at(problem.tree, first, int(segment.end))] = True
    return mask


def decisions_of(view: LayoutView, canonical: Sequence[object]) -> frozenset[int] | None:
    """The ART decision set a layout takes, or ``None`` when a shared segment ends inside a canonical
    segment (a partial share ART's layouts cannot express)."""
    keys = {
        (tuple(s.sequence_indices), int(s.end)): int(s.index)
        for s in canonical
        if len(s.sequence_indices) > 1
    }
    taken = set()
    for segment in view.segments:
        if len(segment.sequence_indices) > 1:
            decision = keys.get((segment.sequence_indices, segment.end))
            if decision is None:
                return None
            taken.add(decision)
    return frozenset(taken)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two rankings (lower is better in both); ``None`` with fewer than two items or
    when either ranking ties everything."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 2:
        return None
    i, j = np.triu_indices(a.size, k=1)
    da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    denominator = float(np.sqrt(np.count_nonzero(da) * np.count_nonzero(db)))
    if denominator == 0.0:
        return None
    return float((da * db).sum()) / denominator


def dense_ranks(keys: Sequence[object]) -> list[int]:
    """Rank of each key among the distinct keys (0 = smallest): tuples ranked as ART compares them."""
    order = {key: rank for rank, key in enumerate(sorted(set(keys)))}
    return [order[key] for key in keys]


def discordant_pairs(x: Sequence[float], y: Sequence[float]) -> list[tuple[int, int]]:
    """The pairs ``(i, j)``, ``i < j``, that the two rankings order strictly the opposite way."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(a.size, k=1)
    opposite = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) < 0
    return list(zip(i[opposite].tolist(), j[opposite].tolist(), strict=True))


def cpplan_terms(problem: Problem, wave: WavePlan) -> dict[str, float]:
    """The seconds cpplan's card charges a priced wave, by term: the busiest rank's seconds of each
    local quantity, the GDN hand-off and the per-wave overhead (``cost_s`` is the per-barrier slowest
    rank plus these last two, so the busiest rank's terms are a close, not exact, split of it)."""
    rank = int(np.argmax(wave.prices.time_s))
    seconds = wave.quantities[rank] * problem.card.constants.time_coefficients
    terms = {q.name: float(seconds[k]) for k, q in enumerate(QUANTITIES) if seconds[k]}
    terms["gdn_handoff"] = float(wave.handoff.seconds)
    terms["wave_overhead"] = float(problem.card.wave_overhead_s)
    return terms


def term_differences(first: dict[str, float], second: dict[str, float], *, floor: float) -> dict[str, float]:
    """``second - first`` per term, leaving out differences below ``floor`` in magnitude."""
    names = sorted(set(first) | set(second))
    deltas = {n: second.get(n, 0.0) - first.get(n, 0.0) for n in names}
    return {n: d for n, d in deltas.items() if abs(d) >= floor}


def held_out_cases() -> list[Case]:
    """GRPO and agent-tree steps at seeds and sizes the bench suite does not use."""
    return [
        Case(
            name="heldout_grpo_g8_s7",
            family="grpo",
            build=lambda: synthetic.grpo(
                num_prompts=6,
                group_size=8,
                system_tokens=512,
                prompt_tokens=(1024, 6144),
                completion_tokens=(256, 2048),
                seed=7,
                items_per_prompt=False,
            ),
        ),
        Case(
            name="heldout_grpo_ref_2x8",
            family="grpo",
            build=lambda: synthetic.grpo(
                num_prompts=2,
                group_size=8,
                system_tokens=2048,
                prompt_tokens=8192,
                completion_tokens=512,
                seed=11,
            ),
        ),
        Case(
            name="heldout_agent_trees_s3",
            family="agent",
            build=lambda: synthetic.agent_trees(
                num_trees=4, depth=4, branching=2, turn_tokens=(512, 3072), seed=3
            ),
        ),
        Case(
            name="heldout_agent_rollouts_s5",
            family="agent",
            build=lambda: synthetic.agent_rollouts(
                num_tasks=3,
                rollouts_per_task=4,
                num_turns=(2, 4),
                task_tokens=(1024, 4096),
                turn_tokens=(256, 1536),
                seed=5,
            ),
        ),
    ]

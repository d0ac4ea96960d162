"""Which way a wave's GDN states cross CP ranks: the two modes' seconds and the choice between them.

``"rounds"`` (:mod:`cpplan.pricing.handoff`): pieces run round by round, one collective per extra round,
and the recurrence that waits on an earlier round adds to the wave. ``"parallel"``
(:mod:`cpplan.hf.gdn_parallel`): every rank runs its pieces at once from a zero state while forming
each piece's affine state map, one collective carries the maps, and every piece that does not start
from zero runs again from its true state. Priced with the card's hand-off terms
(:class:`~cpplan.spec.card.HandoffSeconds`), per GDN layer and pass as the card's formulas count them:

- rounds: ``(rounds - 1) round_s + crossings state_s + waiting tokens x wait_s_per_token``;
- parallel: ``round_s + 2 crossings state_s`` (each crossing sends a map ``[A | B]``: the transition,
  ``key dim x key dim``, and the zero-state final state, one state's bytes each at Qwen3.5/3.6's
  ``key dim = value dim``) ``+ (max_r before_r + max_r after_r - max_r T_r) x wait_s_per_token``: the
  exchange is a barrier between the runs before it (``before_r``: rank ``r``'s tokens of pieces starting
  from zero, and twice those of pieces with both a source and a successor, run from zero for ``B`` and
  from the identity for ``A``) and the reruns after it (``after_r``: its tokens of pieces with a source);
  the per-rank time already counts each rank's ``T_r`` tokens once.

So rounds wins where pieces already overlap (many requests, short continuations: little waits) and
at CP 2 (the second rank's rerun waits as long as its round would), parallel where one long sequence
spans more ranks (each round would wait for the whole previous rank).
:func:`choose_gdn_handoff` is the one place the choice is made. The wave's ``cost_s`` still counts the
rounds' seconds (what the verifier recounts); the chosen mode costs at most that.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cpplan.pricing.handoff import Handoff, Pieces, chunk_pieces
from cpplan.spec.card import HandoffSeconds

ROUNDS = "rounds"
PARALLEL = "parallel"
GDN_HANDOFF_MODES = (ROUNDS, PARALLEL)
"""The values of a wave's ``gdn_handoff`` (a plan without the field means ``"rounds"``)."""


def parallel_seconds(
    pieces: Pieces, seg_offset: np.ndarray, seg_parent: np.ndarray, num_ranks: int, seconds: HandoffSeconds
) -> float:
    """Seconds parallel state passing adds to a wave with ``pieces`` (0 without crossings)."""
    crossings = int(np.unique(pieces.source[pieces.source >= 0]).size)
    if not crossings:
        return 0.0
    seg = np.searchsorted(seg_offset, pieces.start, side="right") - 1
    first = pieces.start == seg_offset[seg]
    from_zero = first & (seg_parent[seg] < 0)
    parents = np.zeros(seg_parent.size, dtype=bool)
    parents[seg_parent[seg_parent >= 0]] = True
    same_next = np.r_[seg[1:] == seg[:-1], False]
    last_of_segment = ~same_next
    has_successor = same_next | (last_of_segment & parents[seg])
    before = pieces.length * np.where(from_zero, 1, 2 * has_successor)
    after = pieces.length * ~from_zero

    def busiest(weights: np.ndarray) -> float:
        return float(np.bincount(pieces.owner, weights=weights, minlength=num_ranks).max())

    wait_tokens = busiest(before) + busiest(after) - busiest(pieces.length)
    exchange_s = seconds.round_s + 2 * crossings * seconds.state_s
    return float(exchange_s + wait_tokens * seconds.wait_s_per_token)


def choose_gdn_handoff(mode_seconds: Mapping[str, float]) -> str:
    """The mode with the fewest seconds (``"rounds"`` on a tie, and where only it is priced)."""
    rounds_s = mode_seconds[ROUNDS]
    parallel_s = mode_seconds.get(PARALLEL, rounds_s)
    return PARALLEL if parallel_s < rounds_s else ROUNDS


def gdn_handoff_mode(
    layout,
    owner: np.ndarray,
    chunk_tokens: int,
    num_ranks: int,
    seconds: HandoffSeconds,
    rounds: Handoff,
) -> str:
    """The mode a packed layout's GDN states should cross ranks in under a chunk ownership, given its
    rounds hand-off (:func:`~cpplan.pricing.handoff.wave_handoff`): ``"rounds"`` without crossings."""
    if num_ranks == 1 or not seconds.priced or not rounds.crossings:
        return ROUNDS
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, chunk_tokens)
    mode_seconds = {
        ROUNDS: rounds.seconds,
        PARALLEL: parallel_seconds(pieces, layout.seg_offset, layout.seg_parent, num_ranks, seconds),
    }
    return choose_gdn_handoff(mode_seconds)


__all__ = [
    "GDN_HANDOFF_MODES",
    "PARALLEL",
    "ROUNDS",
    "choose_gdn_handoff",
    "gdn_handoff_mode",
    "parallel_seconds",
]

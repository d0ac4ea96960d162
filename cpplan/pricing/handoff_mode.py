"""Which way a wave's GDN states cross CP ranks: the choice among the modes' prices.

Rounds and parallel passing are priced in :mod:`cpplan.pricing.handoff`
(:func:`~cpplan.pricing.handoff.rounds_handoff`, :func:`~cpplan.pricing.handoff.parallel_handoff`, from
the card's hand-off terms). Rounds wins where
pieces already overlap (many requests, short continuations: little waits) and at CP 2 (the second rank's
rerun waits as long as its round would), parallel where one long sequence spans more ranks (each round
would wait for the whole previous rank). Head-parallel (:mod:`cpplan.pricing.head_parallel`, where the
card offers it) hands no state over and pays two all-to-alls per GDN layer and pass instead: it wins
where a wave's requests span the CP group and waiting would cost more than moving every token's rows.
:func:`choose_gdn_handoff` is the one place the choice is made, and the wave costs the chosen mode's
seconds (:func:`chosen_handoff`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cpplan.pricing.handoff import HANDOFF_MODES, HEAD_PARALLEL, PARALLEL, ROUNDS, Handoff, handoff_modes
from cpplan.spec.card import HandoffSeconds

GDN_HANDOFF_MODES = HANDOFF_MODES
"""The values of a wave's ``gdn_handoff`` (a plan without the field means ``"rounds"``)."""


def choose_gdn_handoff(mode_seconds: Mapping[str, float]) -> str:
    """The mode with the fewest seconds among those priced (``"rounds"`` on a tie, and where only it is
    priced; then ``"parallel"`` before ``"head_parallel"``)."""
    best = ROUNDS
    for mode in (PARALLEL, HEAD_PARALLEL):
        if mode in mode_seconds and mode_seconds[mode] < mode_seconds[best]:
            best = mode
    return best


def chosen_handoff(
    layout, owner: np.ndarray, chunk_tokens: int, num_ranks: int, seconds: HandoffSeconds
) -> Handoff:
    """A packed layout's hand-off under a chunk ownership in the mode it should run: the cheapest of
    those the card offers (its ``mode`` says which; rounds on a tie, at one rank)."""
    modes = handoff_modes(layout, owner, chunk_tokens, num_ranks, seconds)
    return modes[choose_gdn_handoff({mode: handoff.seconds for mode, handoff in modes.items()})]


__all__ = ["GDN_HANDOFF_MODES", "HEAD_PARALLEL", "PARALLEL", "ROUNDS", "choose_gdn_handoff", "chosen_handoff"]

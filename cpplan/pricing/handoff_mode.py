"""Which way a wave's GDN states cross CP ranks: the choice between the two modes' prices.

Both modes are priced in :mod:`cpplan.pricing.handoff` (:func:`~cpplan.pricing.handoff.rounds_handoff`,
:func:`~cpplan.pricing.handoff.parallel_handoff`, from the card's hand-off terms). Rounds wins where
pieces already overlap (many requests, short continuations: little waits) and at CP 2 (the second rank's
rerun waits as long as its round would), parallel where one long sequence spans more ranks (each round
would wait for the whole previous rank). :func:`choose_gdn_handoff` is the one place the choice is made,
and the wave costs the chosen mode's seconds (:func:`chosen_handoff`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cpplan.pricing.handoff import HANDOFF_MODES, PARALLEL, ROUNDS, Handoff, handoff_modes
from cpplan.spec.card import HandoffSeconds

GDN_HANDOFF_MODES = HANDOFF_MODES
"""The values of a wave's ``gdn_handoff`` (a plan without the field means ``"rounds"``)."""


def choose_gdn_handoff(mode_seconds: Mapping[str, float]) -> str:
    """The mode with the fewest seconds (``"rounds"`` on a tie, and where only it is priced)."""
    rounds_s = mode_seconds[ROUNDS]
    parallel_s = mode_seconds.get(PARALLEL, rounds_s)
    return PARALLEL if parallel_s < rounds_s else ROUNDS


def chosen_handoff(
    layout, owner: np.ndarray, chunk_tokens: int, num_ranks: int, seconds: HandoffSeconds
) -> Handoff:
    """A packed layout's hand-off under a chunk ownership in the mode it should run: the cheaper of
    both (its ``mode`` says which; rounds without crossings, on a tie, at one rank)."""
    modes = handoff_modes(layout, owner, chunk_tokens, num_ranks, seconds)
    return modes[choose_gdn_handoff({mode: handoff.seconds for mode, handoff in modes.items()})]


__all__ = ["GDN_HANDOFF_MODES", "PARALLEL", "ROUNDS", "choose_gdn_handoff", "chosen_handoff"]

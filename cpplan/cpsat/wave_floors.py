"""Per item, what its longest request costs any wave it joins at least (seconds; the model's floors).

Under CP (:mod:`cpplan.cpsat.path_floor`; zero at one rank): per barrier, the least slowest rank over
splits of the path into at most ``cp`` runs; for the wave, the least over ``m = 1 .. cp`` runs of the
per-barrier slowest-rank sum plus the least GDN hand-off ``m`` runs need (``m - 1`` crossings; waiting
tokens count zero). A run owns its tokens and pairs, takes gradients and needs logits as the request
does, and gathers the path tokens it does not own; with loss masks the loss tokens count zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpplan.cpsat.path_floor import RunLoad, least_pair_sum, least_threshold
from cpplan.pricing.problem import Problem
from cpplan.spec.card import HandoffSeconds
from cpplan.spec.quantities import QUANTITIES


@dataclass(frozen=True, kw_only=True)
class ItemFloors:
    """Per item (rows), the least seconds of its longest request: per barrier of the card
    (``barrier_s``, shape ``(items, barriers)``) and for the wave (``wave_s``, barriers and hand-off)."""

    barrier_s: np.ndarray
    wave_s: np.ndarray


def item_floors(problem: Problem) -> ItemFloors:
    """The floors of every item of ``problem`` (all zero at one CP rank)."""
    card, cp = problem.card, problem.topology.cp
    barriers = card.constants.barrier_coefficients
    if cp == 1:
        return ItemFloors(
            barrier_s=np.zeros((problem.num_items, barriers.shape[0])), wave_s=np.zeros(problem.num_items)
        )
    length, flags = _longest_requests(problem)
    rows = np.stack([length, flags["grad"], flags["loss"]], axis=1)
    unique, inverse = np.unique(rows, axis=0, return_inverse=True)
    unique_flags = {"all": np.ones(len(unique), bool), "grad": unique[:, 1] > 0, "loss": unique[:, 2] > 0}
    loads = [_barrier_load(row, unique[:, 0], unique_flags) for row in barriers]
    runs = np.full(len(unique), cp)
    barrier_s = np.stack([least_threshold(load, unique[:, 0], runs)[0] for load in loads], axis=1)
    wave_s = _wave_floor(loads, barriers, unique[:, 0], barrier_s.sum(axis=1), cp, card.handoff)
    return ItemFloors(barrier_s=barrier_s[inverse.ravel()], wave_s=wave_s[inverse.ravel()])


def _longest_requests(problem: Problem) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per item, its longest request's length (the first of equal ones) and its ``grad``/``loss``
    flags (``loss``: logits at every token, so never with loss masks)."""
    lengths = [int(seq.size) for seq in problem.tree.sequences]
    longest = np.full(problem.num_items, -1, dtype=np.int64)
    for r, item in enumerate(problem.request_item.tolist()):
        if longest[item] < 0 or lengths[r] > lengths[longest[item]]:
            longest[item] = r
    loss = problem.request_loss if problem.loss_positions is None else np.zeros_like(problem.request_loss)
    flags = {"all": np.ones(longest.size, bool), "grad": problem.request_grad[longest], "loss": loss[longest]}
    return np.array(lengths, dtype=float)[longest], flags


def _barrier_load(coefficients: np.ndarray, length: np.ndarray, flags: dict[str, np.ndarray]) -> RunLoad:
    """One barrier's load of a run of each item's path. The gathered path tokens add ``remote_s`` per
    token not owned, ``remote_s · (length - run)``: an offset and a discount per owned token where the
    token's own seconds cover it, otherwise left out (a bound may drop a nonnegative term)."""
    per = {"token": np.zeros(length.size), "pair": np.zeros(length.size), "remote": np.zeros(length.size)}
    for i, q in enumerate(QUANTITIES):
        if q.count in per:
            per[q.count] = per[q.count] + coefficients[i] * flags[q.only]
    remote = np.where(per["token"] >= per["remote"], per["remote"], 0.0)
    return RunLoad(token_s=per["token"] - remote, pair_s=per["pair"], offset_s=remote * length)


COUPLED_PATHS = 4
"""The longest distinct paths whose split is searched for both barrier groups at once; the others
take the sum of the per-barrier floors (a weaker bound, no search)."""


def _wave_floor(
    loads: list[RunLoad], barriers: np.ndarray, length: np.ndarray, separate_s: np.ndarray, cp: int, handoff
) -> np.ndarray:
    """Per path: unsplit (one run, no hand-off), or split over up to ``cp`` runs at no less than the
    split's least barrier cost plus the least hand-off of two runs (``F_m`` only falls with ``m`` and
    the hand-off only grows)."""
    unsplit = sum(load.of(np.zeros_like(length), length) - load.offset_s for load in loads)
    split = separate_s.copy()
    pair_columns = [i for i, q in enumerate(QUANTITIES) if q.count == "pair"]
    with_pairs = barriers[:, pair_columns].sum(axis=1) > 0
    groups = [
        _merged([ld for ld, p in zip(loads, with_pairs, strict=True) if p == side]) for side in (True, False)
    ]
    if all(g is not None for g in groups):
        top = np.argsort(-length, kind="stable")[:COUPLED_PATHS]
        first, second = (_subset(g, top) for g in groups)
        coupled = least_pair_sum(first, second, length[top], np.full(top.size, cp))
        split[top] = np.maximum(split[top], coupled)
    two_runs = _handoff_floor(np.array([2]), handoff)[0]
    return np.minimum(unsplit, split + two_runs)


def _handoff_floor(runs: np.ndarray, handoff: HandoffSeconds) -> np.ndarray:
    """The least hand-off of a path in ``runs`` runs: ``runs - 1`` crossings in the cheapest mode (where
    the card offers head-parallel GDN, at least its collectives' latency: no state crosses there)."""
    crossings = runs - 1
    by_rounds = crossings * (handoff.round_s + handoff.state_s)
    in_parallel = np.where(crossings > 0, handoff.round_s + 2 * crossings * handoff.state_s, 0.0)
    least = np.minimum(by_rounds, in_parallel)
    if handoff.head_parallel_priced:
        least = np.minimum(least, np.where(crossings > 0, handoff.head_collective_s, 0.0))
    return least


def _merged(loads: list[RunLoad]) -> RunLoad | None:
    """The sum of ``loads`` (one group), or ``None`` for an empty group."""
    if not loads:
        return None
    return RunLoad(
        token_s=sum(load.token_s for load in loads),
        pair_s=sum(load.pair_s for load in loads),
        offset_s=sum(load.offset_s for load in loads),
    )


def _subset(load: RunLoad, rows: np.ndarray) -> RunLoad:
    """``load``'s coefficients of ``rows`` only."""
    return RunLoad(token_s=load.token_s[rows], pair_s=load.pair_s[rows], offset_s=load.offset_s[rows])

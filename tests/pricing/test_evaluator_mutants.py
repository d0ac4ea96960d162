"""The evaluator's prices and the GDN hand-off, against plain definitions: envelopes, binding envelope
and breakdown from the card's terms; rounds, sources and waiting tokens from a walk of the pieces on
random deep segment trees, where the evaluator's vectorized pointer jumping and the verifier's own
count must both agree with it. Written against the survivors of mutation testing (docs/robustness.md,
"Mutation testing")."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import cpplan
from cpplan import Topology
from cpplan.pricing.evaluator import envelope_bytes, price, wave_cost_s
from cpplan.pricing.handoff import NO_HANDOFF, chunk_pieces, rounds_handoff, wave_handoff
from cpplan.spec.card import HandoffSeconds
from cpplan.verifier.handoff_recount import handoff_seconds
from cpplan.verifier.owners import OwnerRuns
from cpplan.verifier.rank_prices import pieces_of

UNIT = HandoffSeconds(round_s=1.0, state_s=1e-3, wait_s_per_token=1e-6)
"""Hand-off seconds that keep rounds, states and waiting tokens apart in one number."""


@pytest.fixture(scope="module")
def card(qwen36) -> cpplan.ResolvedCard:
    """The Qwen3.6 card resolved at CP4 (several envelopes, GDN terms)."""
    return qwen36.resolve(Topology(cp=4))


def _quantities(card, num_ranks: int, seed: int) -> np.ndarray:
    """Random integer local quantities, one row per rank."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 50_000, (num_ranks, int(card.term_quantity.max()) + 1)).astype(np.int64)


def _plain_envelopes(card, row) -> list[float]:
    return [
        float(card.envelope_static_bytes[e])
        + sum(
            float(card.term_bytes[t]) * float(row[card.term_quantity[t]])
            for t in range(len(card.term_names))
            if card.envelope_terms[e, t]
        )
        for e in range(len(card.envelope_names))
    ]


def test_prices_are_the_cards_terms_summed_per_envelope(card):
    """For random per-rank quantities (given as an integer matrix), every envelope is its static bytes
    plus its member terms; the peak is ``ceil(safety * max envelope)`` (integer bytes), the binding
    envelope the largest, the time the cost terms' sum, and the wave costs, per barrier (the layer kind
    each cost term names), the slowest rank, summed over barriers, plus the per-wave seconds (more than
    the slowest rank's total, since different ranks are slowest in different barriers here). One rank
    given as a vector is priced as a one-row matrix."""
    q = _quantities(card, 5, seed=1)
    prices = price(card, q)
    envelopes = envelope_bytes(card, q)
    assert envelopes.shape == (5, len(card.envelope_names))
    for r in range(5):
        plain = _plain_envelopes(card, q[r])
        assert envelopes[r] == pytest.approx(plain, rel=1e-12)
        assert int(prices.envelope[r]) == int(np.argmax(plain))
        assert prices.peak_bytes[r] == math.ceil(card.safety * max(plain))
        seconds = sum(
            float(card.cost_seconds[c]) * float(q[r, card.cost_quantity[c]])
            for c in range(len(card.cost_names))
        )
        assert prices.time_s[r] == pytest.approx(seconds, rel=1e-12)
    assert prices.peak_bytes.dtype == np.int64
    barriers = sorted(set(card.cost_barrier.tolist()))
    assert len(barriers) > 1
    per_barrier = [
        max(
            sum(
                float(card.cost_seconds[c]) * float(q[r, card.cost_quantity[c]])
                for c in range(len(card.cost_names))
                if card.cost_barrier[c] == b
            )
            for r in range(5)
        )
        for b in barriers
    ]
    expected = math.fsum(per_barrier) + card.wave_overhead_s
    assert expected > float(prices.time_s.max()) + card.wave_overhead_s
    assert wave_cost_s(card, prices) == pytest.approx(expected, rel=1e-12)
    one = price(card, q[2])
    assert one.peak_bytes.tolist() == [prices.peak_bytes[2]]
    assert envelope_bytes(card, q[2]).shape == (1, len(card.envelope_names))


def test_breakdown_is_the_binding_envelopes_static_bytes_and_terms(card):
    """A rank's breakdown names ``static`` and exactly the terms of its binding envelope, each its
    bytes (rounded, before the safety factor); they add up to the envelope the peak is taken from."""
    q = _quantities(card, 3, seed=3)
    prices = price(card, q)
    for r in range(3):
        e = int(prices.envelope[r])
        parts = prices.breakdown(card, r)
        members = {card.term_names[t] for t in range(len(card.term_names)) if card.envelope_terms[e, t]}
        assert set(parts) == {"static", *members}
        assert parts["static"] == round(card.envelope_static_bytes[e])
        for t, name in enumerate(card.term_names):
            if name in members:
                assert parts[name] == round(float(card.term_bytes[t]) * float(q[r, card.term_quantity[t]]))
        assert sum(parts.values()) == pytest.approx(_plain_envelopes(card, q[r])[e], abs=len(parts))


def _deep_tree(rng, num_segments: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments in packed order, each parent before its children, mostly chained to the previous
    segment (deep paths), sometimes a new root or a branch off an earlier segment."""
    parent = np.full(num_segments, -1, dtype=np.int64)
    for s in range(1, num_segments):
        roll = rng.random()
        parent[s] = s - 1 if roll < 0.7 else (-1 if roll < 0.8 else int(rng.integers(0, s)))
    length = rng.integers(1, 12, num_segments)
    offset = np.concatenate([[0], np.cumsum(length)[:-1]])
    return offset, length, parent


def _walk(offset, length, parent, owner, chunk) -> tuple[list[int], list[int], list[int], list[int]]:
    """Pieces by a plain walk of the packed tokens: a piece starts at every segment start and every
    change of chunk owner; its predecessor is the previous piece of its segment, or the piece holding
    its parent's last token; a crossing adds a round. Returns starts, owners, rounds, sources (-1)."""
    packed = int(offset[-1] + length[-1])
    token_owner = np.repeat(owner, chunk)[:packed]
    seg_of = np.repeat(np.arange(offset.size), length)
    starts = [t for t in range(packed) if t in set(offset.tolist()) or token_owner[t] != token_owner[t - 1]]
    owners, rounds, sources = [], [], []
    piece_of_token = np.searchsorted(starts, np.arange(packed), side="right") - 1
    for i, t in enumerate(starts):
        s = int(seg_of[t])
        if t != offset[s]:
            pred = i - 1
        elif parent[s] >= 0:
            pred = int(piece_of_token[offset[parent[s]] + length[parent[s]] - 1])
        else:
            pred = -1
        crossing = pred >= 0 and owners[pred] != token_owner[t]
        owners.append(int(token_owner[t]))
        rounds.append((rounds[pred] if pred >= 0 else 0) + int(crossing))
        sources.append(pred if crossing else -1)
    return starts, owners, rounds, sources


@pytest.mark.parametrize("seed", range(12))
def test_handoff_on_deep_trees_is_the_walk_of_its_pieces(seed, qwen36):
    """On random deep segment trees (paths of up to 40 segments, branches, several roots) under a
    random chunk ownership over 2-4 ranks: the evaluator's pieces have the walk's starts, owners,
    rounds and sources; its rounds, handed-over states and waiting tokens (sum over rounds of the
    busiest rank's tokens less the busiest rank's total) are the walk's; and the verifier's own count,
    priced at the same seconds, is the same."""
    rng = np.random.default_rng(seed)
    cp, chunk = int(rng.integers(2, 5)), int(rng.integers(1, 5))
    offset, length, parent = _deep_tree(rng, int(rng.integers(2, 41)))
    packed = int(offset[-1] + length[-1])
    owner = rng.integers(0, cp, -(-packed // chunk))
    starts, owners, rounds, sources = _walk(offset, length, parent, owner, chunk)
    pieces = chunk_pieces(offset, length, parent, owner, chunk)
    assert pieces.start.tolist() == starts
    assert pieces.length.tolist() == np.diff(starts, append=packed).tolist()
    assert pieces.owner.tolist() == owners
    assert pieces.round.tolist() == rounds
    assert pieces.source.tolist() == sources
    num_rounds = max(rounds) + 1
    work = np.zeros((cp, num_rounds), dtype=np.int64)
    for size, rank, round_ in zip(pieces.length.tolist(), owners, rounds, strict=True):
        work[rank, round_] += size
    wait = int(work.max(axis=0).sum() - work.sum(axis=1).max())
    handoff = rounds_handoff(pieces, cp, UNIT)
    num_sources = len({s for s in sources if s >= 0})
    assert (handoff.rounds, handoff.crossings, handoff.wait_tokens) == (num_rounds, num_sources, wait)
    assert handoff.seconds == pytest.approx(
        (num_rounds - 1) * 1.0 + num_sources * 1e-3 + wait * 1e-6, rel=1e-12
    )

    card = dataclasses.replace(qwen36.resolve(Topology(cp=cp)), handoff=UNIT)
    segments = [(int(p), 0, int(n)) for p, n in zip(parent, length, strict=True)]
    token_owner = np.repeat(owner, chunk)[:packed]
    cuts = np.concatenate([[0], np.flatnonzero(token_owner[1:] != token_owner[:-1]) + 1])
    runs = OwnerRuns(start=cuts, end=np.append(cuts[1:], packed), owner=token_owner[cuts])
    verifier_pieces = pieces_of(segments, offset.tolist(), runs)
    assert handoff_seconds(card, segments, offset.tolist(), verifier_pieces) == pytest.approx(
        handoff.seconds, rel=1e-12
    )


def test_no_handoff_on_one_rank_or_when_unpriced(qwen36):
    """At one rank, or with a card that prices no hand-off, a wave adds no hand-off time (the
    evaluator's and the verifier's count alike), even where pieces cross ranks."""
    offset, length, parent = np.array([0, 10]), np.array([10, 10]), np.array([-1, 0])
    layout = dataclasses.make_dataclass("Layout", ["seg_offset", "seg_length", "seg_parent"])(
        offset, length, parent
    )
    crossing = np.array([0, 1])
    assert rounds_handoff(chunk_pieces(offset, length, parent, crossing, 10), 2, UNIT).seconds > 0
    assert wave_handoff(layout, crossing, 10, 2, HandoffSeconds()) == NO_HANDOFF
    assert wave_handoff(layout, np.array([0, 0]), 10, 1, UNIT) == NO_HANDOFF
    assert wave_handoff(layout, crossing, 10, 2, UNIT).seconds == pytest.approx(1.0 + 1e-3 + 10e-6)
    segments = [(-1, 0, 10), (0, 10, 10)]
    runs = OwnerRuns(start=np.array([0, 10]), end=np.array([10, 20]), owner=crossing)
    pieces = pieces_of(segments, [0, 10], runs)
    for cp, seconds in ((2, HandoffSeconds()), (1, UNIT)):
        card = dataclasses.replace(qwen36.resolve(Topology(cp=cp)), handoff=seconds)
        assert handoff_seconds(card, segments, [0, 10], pieces) == 0.0
    card = dataclasses.replace(qwen36.resolve(Topology(cp=2)), handoff=UNIT)
    assert handoff_seconds(card, segments, [0, 10], pieces) == pytest.approx(1.0 + 1e-3 + 10e-6)
    one_piece = pieces_of(
        segments[:1], [0], OwnerRuns(start=np.array([0]), end=np.array([10]), owner=np.array([1]))
    )
    assert handoff_seconds(card, segments[:1], [0], one_piece) == 0.0

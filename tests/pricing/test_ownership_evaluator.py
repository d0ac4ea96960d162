"""Chunks, CP ownership, local quantities and the numpy evaluator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cpplan
from cpplan.pricing import ownership
from cpplan.pricing.evaluator import price
from cpplan.pricing.layout import pack, share_mask
from cpplan.pricing.ownership import (
    chunk_stats,
    contiguous_split,
    general_quantities,
    owned_ranges,
    range_ends,
    range_quantities,
    rank_quantities,
)
from cpplan.pricing.problem import Problem
from cpplan.pricing.tree import PrefixTree
from cpplan.spec.quantities import QUANTITIES, QUANTITY_INDEX
from cpplan.spec.settings import Settings


def packed(seqs, spec="full", grad=None):
    tree = PrefixTree([np.asarray(s) for s in seqs])
    g = np.ones(len(seqs), dtype=bool) if grad is None else np.asarray(grad)
    return tree, pack(tree, np.arange(len(seqs)), share_mask(tree, spec), g, g)


def pieces_of(owner_tokens, segment_ids, rank):
    """Runs of consecutive tokens of one segment that ``rank`` owns, counted token by token."""
    count, previous = 0, None
    for owner, segment in zip(owner_tokens.tolist(), segment_ids.tolist(), strict=True):
        count += owner == rank and previous != (owner, segment)
        previous = (owner, segment)
    return count


def brute_quantities(tree, layout, owner_tokens, num_ranks):
    """Local quantities counted token by token (segments: the pieces a rank owns)."""
    meta = layout.token_metadata(tree)
    grad = layout.seg_grad[meta["segment_ids"]]
    q = np.zeros((num_ranks, len(QUANTITIES)))
    for r in range(num_ranks):
        mine = owner_tokens == r
        q[r] = [
            mine.sum(),
            (mine & grad).sum(),
            (mine & grad).sum(),
            pieces_of(owner_tokens, meta["segment_ids"], r),
            (meta["position_ids"][mine] + 1).sum(),
            (meta["position_ids"][mine & grad] + 1).sum(),
            layout.packed_tokens - mine.sum(),
        ]
    return q


def test_rank_quantities_match_token_by_token(rng):
    """For random trees, chunk sizes and arbitrary (non-contiguous) chunk owners, the closed-form chunk
    statistics give exactly the token-by-token local quantities, owned pieces (runs of one segment on a
    rank, two for a rank holding two separate ranges of one segment) included."""
    for _ in range(25):
        base = rng.integers(0, 50, 300)
        seqs = [
            np.concatenate([base[: rng.integers(1, 300)], rng.integers(0, 50, rng.integers(1, 200))])
            for _ in range(rng.integers(1, 6))
        ]
        grad = rng.random(len(seqs)) < 0.6
        tree, layout = packed(seqs, rng.choice(["full", "none", "min_span:40"]), grad)
        chunk = int(rng.choice([1, 7, 32, 128]))
        stats = chunk_stats(layout, chunk)
        cp = int(rng.integers(1, 5))
        owner = rng.integers(0, cp, stats.num_chunks)
        owner_tokens = np.repeat(owner, stats.tokens)
        expected = brute_quantities(tree, layout, owner_tokens, cp)
        assert np.array_equal(rank_quantities(stats, owner, cp), expected)


def test_contiguous_owners_sum_by_prefix_exactly(rng):
    """For contiguous chunk owners in rank order (ranks with no chunk included), the prefix-sum path of
    :func:`rank_quantities` gives exactly the token-by-token quantities and the general per-count rules'
    (pieces: a segment cut between ranks counts on both, one continued across chunks of a rank once)."""
    for _ in range(40):
        base = rng.integers(0, 50, 300)
        seqs = [
            np.concatenate([base[: rng.integers(1, 300)], rng.integers(0, 50, rng.integers(1, 200))])
            for _ in range(rng.integers(1, 6))
        ]
        grad = rng.random(len(seqs)) < 0.6
        tree, layout = packed(seqs, rng.choice(["full", "none", "min_span:40"]), grad)
        stats = chunk_stats(layout, int(rng.choice([1, 7, 32, 128])))
        cp = int(rng.integers(2, 6))
        owner = np.sort(rng.integers(0, cp, stats.num_chunks))
        expected = brute_quantities(tree, layout, np.repeat(owner, stats.tokens), cp)
        assert np.array_equal(rank_quantities(stats, owner, cp), expected)
        assert np.array_equal(general_quantities(stats, owner, cp), expected)


def test_contiguous_split_is_min_max_optimal(rng):
    """The contiguous split's bottleneck equals the best over all cut positions (brute force)."""
    for _ in range(40):
        weights = rng.random(int(rng.integers(1, 9))) * 10
        k = int(rng.integers(1, 4))
        owner = contiguous_split(weights, k)
        assert (np.diff(owner) >= 0).all() and owner.min() == 0 and owner.max() < k
        got = max(weights[owner == r].sum() for r in range(k))
        best = min(
            max(weights[a:b].sum() for a, b in zip((0, *cuts), (*cuts, weights.size), strict=True))
            for cuts in itertools.combinations_with_replacement(range(weights.size + 1), k - 1)
            if list(cuts) == sorted(cuts)
        )
        assert got == pytest.approx(best, rel=1e-9)


def _brute_bottleneck(weights: np.ndarray, k: int, max_chunks: int | None = None) -> float:
    """The least largest range over every way to cut ``weights`` into ``k`` contiguous ranges."""
    best = np.inf
    for cuts in itertools.combinations_with_replacement(range(weights.size + 1), k - 1):
        bounds = list(zip((0, *cuts), (*cuts, weights.size), strict=True))
        if max_chunks is not None and any(b - a > max_chunks for a, b in bounds):
            continue
        best = min(best, max(weights[a:b].sum() for a, b in bounds))
    return best


def test_least_bottleneck_is_exact(rng):
    """On integer weights (exact in floating point) the split's bottleneck is exactly the brute-force
    optimum, with and without a per-range chunk limit; the bidding search never rests on a bound that a
    cheaper cut would beat."""
    for _ in range(200):
        n = int(rng.integers(1, 11))
        weights = rng.integers(0, 20, n).astype(np.float64)
        weights[int(rng.integers(0, n))] += 1  # at least one positive weight
        k = int(rng.integers(2, 5))
        owner = contiguous_split(weights, k)
        assert max(weights[owner == r].sum() for r in range(k)) == _brute_bottleneck(weights, k)
        longest = int(np.ceil(n / k)) + int(rng.integers(0, 2))
        owner = contiguous_split(weights, k, max_chunks=longest)
        assert np.bincount(owner, minlength=k).max() <= longest
        got = max(weights[owner == r].sum() for r in range(k))
        assert got == pytest.approx(_brute_bottleneck(weights, k, longest), rel=1e-9)


def test_ownership_balances_attention_work(qwen36):
    """One 64K-token request at CP2: the time-balanced split gives rank 0 (early positions, cheap
    attention) more tokens than rank 1, and its slowest rank is faster than an even token split."""
    wl = cpplan.Workload.from_items(
        [cpplan.Item(id="long", requests=(cpplan.Request(tokens=np.arange(65536) % 1000),))]
    )
    problem = Problem.build(wl, Settings(topology=cpplan.Topology(cp=2), model=qwen36, memory_bytes=10**12))
    layout = problem.pack([0], "full")
    stats = chunk_stats(layout)
    by_time = contiguous_split(stats.quantity_matrix() @ problem.card.time_coefficients(), 2)
    by_tokens = contiguous_split(stats.tokens.astype(float), 2)
    t_time = price(problem.card, rank_quantities(stats, by_time, 2)).time_s
    t_tokens = price(problem.card, rank_quantities(stats, by_tokens, 2)).time_s
    tokens = rank_quantities(stats, by_time, 2)[:, QUANTITY_INDEX["tokens"]]
    assert tokens[0] > tokens[1]
    assert t_time.max() < t_tokens.max()
    assert owned_ranges(by_time, stats, 0) == [(0, int(tokens[0]))]


def test_price_is_max_of_sums_with_safety(qwen36):
    """A rank's peak is ceil(safety x max over envelopes of static + sum of coefficient x local
    quantity), computed here by hand from the card's resolved terms."""
    card = qwen36.resolve(cpplan.Topology(cp=2), num_layers=8)
    q = np.array([[1000, 900, 800, 3, 10**6, 9 * 10**5, 5000]], dtype=float)
    envelopes = []
    for e in range(card.num_envelopes):
        total = card.envelope_static_bytes[e]
        for t in range(len(card.term_names)):
            if card.envelope_terms[e, t]:
                total += card.term_bytes[t] * q[0, card.term_quantity[t]]
        envelopes.append(total)
    assert price(card, q).peak_bytes[0] == int(np.ceil(card.safety * max(envelopes)))


@pytest.mark.parametrize("model", ["qwen3.6-35b-a3b", "qwen3-8b"])
def test_no_floor_switched_off_under_cp(model):
    """Every floor term priced at CP1 is still priced (with at least the same bytes per unit) at
    CP 2, 4 and 8: floors are never switched off because cp > 1."""
    card = cpplan.load_model(model)
    base = card.resolve(cpplan.Topology(cp=1))
    base_terms = dict(zip(base.term_names, base.term_bytes, strict=True))
    for cp in (2, 4, 8):
        other = card.resolve(cpplan.Topology(cp=cp))
        terms = dict(zip(other.term_names, other.term_bytes, strict=True))
        for name, value in base_terms.items():
            if value > 0:
                assert terms.get(name, 0) >= value, (name, cp)


def test_cp_ranks_priced_on_local_tokens(small_grpo, qwen36):
    """At CP4 each rank's token-proportional floor terms are priced on that rank's own local tokens
    (never the wave's global packed tokens): the busiest rank holds under half of the CP1 wave's
    checkpoint bytes, and its peak is below the CP1 peak."""
    one = Problem.build(
        small_grpo, Settings(topology=cpplan.Topology(cp=1), model=qwen36, memory_bytes=10**12)
    )
    four = Problem.build(
        small_grpo, Settings(topology=cpplan.Topology(cp=4), model=qwen36, memory_bytes=10**12)
    )
    from cpplan.pricing.wave import price_wave

    items = list(range(small_grpo.num_items))
    w1 = price_wave(one, items, one.pack(items, "full"), "full")
    w4 = price_wave(four, items, four.pack(items, "full"), "full")
    card = four.card
    t = card.term_names.index("checkpointed_inputs")
    local = w4.quantities[:, QUANTITY_INDEX["tokens"]]
    assert np.allclose(w4.prices.term_bytes[:, t], card.term_bytes[t] * local)
    assert local.sum() == w1.packed_tokens and local.max() < w1.packed_tokens
    assert w4.prices.term_bytes[:, t].max() < 0.5 * w1.prices.term_bytes[0, t]
    assert w4.peak_bytes < w1.peak_bytes


def test_range_quantities_of_many_splits_are_each_splits_own(rng):
    """range_quantities of several contiguous splits at once (each given by its ranks' range ends,
    ranks with no chunk included) gives, split by split, exactly the general per-count rules' local
    quantities of that split's chunk owners."""
    for _ in range(30):
        base = rng.integers(0, 50, 300)
        seqs = [
            np.concatenate([base[: rng.integers(1, 300)], rng.integers(0, 50, rng.integers(1, 200))])
            for _ in range(rng.integers(1, 6))
        ]
        _, layout = packed(seqs, rng.choice(["full", "none", "min_span:40"]), rng.random(len(seqs)) < 0.6)
        stats = chunk_stats(layout, int(rng.choice([1, 7, 32, 128])))
        cp = int(rng.integers(2, 6))
        ends = np.sort(rng.integers(0, stats.num_chunks + 1, (int(rng.integers(1, 8)), cp)), axis=1)
        ends[:, -1] = stats.num_chunks
        found = range_quantities(stats, ends)
        for split, split_ends in enumerate(ends):
            owner = np.repeat(np.arange(cp), np.diff(np.r_[0, split_ends]))
            assert np.array_equal(found[split], general_quantities(stats, owner, cp))


def _greedy_fill(weights: list[float], bound: float, num_ranks: int) -> list[int]:
    """Ranks filled in order, each as far as ``bound`` allows and at least one chunk while any is left:
    every rank's range end."""
    ends, start = [], 0
    for _ in range(num_ranks):
        end, total = start, 0.0
        while end < len(weights) and (end == start or total + weights[end] <= bound * (1 + 1e-12)):
            total += weights[end]
            end += 1
        ends.append(end)
        start = end
    return ends


@pytest.mark.parametrize("list_search_chunks", [ownership.LIST_SEARCH_CHUNKS, 0])
def test_range_ends_fill_in_order_at_the_least_bottleneck(rng, monkeypatch, list_search_chunks):
    """On integer weights (exact in floating point), range_ends (the bidding search, filling the ranks
    at every bid) returns exactly the ranks' range ends of the in-order fill at the brute-force least
    bottleneck, and contiguous_split is that split's owners; searching the prefix sums as a list or as
    an array alike."""
    monkeypatch.setattr(ownership, "LIST_SEARCH_CHUNKS", list_search_chunks)
    for _ in range(300):
        n = int(rng.integers(1, 11))
        weights = rng.integers(0, 20, n).astype(np.float64)
        weights[int(rng.integers(0, n))] += 1
        k = int(rng.integers(2, 5))
        expected = _greedy_fill(weights.tolist(), _brute_bottleneck(weights, k), k)
        assert range_ends(weights, k) == expected
        assert np.array_equal(contiguous_split(weights, k), np.repeat(np.arange(k), np.diff([0, *expected])))

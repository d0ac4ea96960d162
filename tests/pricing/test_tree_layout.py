"""The prefix tree, layouts and packed metadata."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from cpplan.pricing.layout import pack, share_mask
from cpplan.pricing.tree import PrefixTree, adjacent_common_prefixes


def brute_force_node_count(seqs: list[list[int]]) -> int:
    """Radix-tree nodes (root excluded) from first principles: distinct prefixes that end at a branch
    point, at a request end, or where the set of requests through them changes."""
    prefixes: dict[tuple[int, ...], set[int]] = {}
    for r, s in enumerate(seqs):
        for k in range(1, len(s) + 1):
            prefixes.setdefault(tuple(s[:k]), set()).add(r)
    ends = {tuple(s) for s in seqs}
    count = 0
    for prefix, members in prefixes.items():
        children = [
            p
            for p in (
                (*prefix, t)
                for t in {
                    q[len(prefix)]
                    for q in map(list, prefixes)
                    if len(q) > len(prefix) and tuple(q[: len(prefix)]) == prefix
                }
            )
            if p in prefixes
        ]
        if prefix in ends or len(children) != 1 or prefixes[children[0]] != members:
            count += 1
    return count


def test_tree_matches_brute_force(rng):
    """On random sequences over a tiny alphabet (many shared prefixes, prefixes of others, duplicates),
    the radix tree has exactly the nodes a brute-force trie compression finds, and every node's span is
    the same tokens in every request through it."""
    for _ in range(30):
        seqs = [rng.integers(0, 3, rng.integers(1, 7)).tolist() for _ in range(rng.integers(1, 7))]
        seqs.append(list(seqs[0]))
        tree = PrefixTree([np.array(s) for s in seqs])
        assert tree.num_nodes - 1 == brute_force_node_count(seqs)
        for r, s in enumerate(seqs):
            rebuilt = np.concatenate([tree.node_tokens(v) for v in tree.path(r)])
            assert rebuilt.tolist() == s


def scalar_common_prefix(a: list[int], b: list[int]) -> int:
    """The longest common prefix of two token lists, one token at a time."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def test_adjacent_common_prefixes_match_the_scalar_definition(rng):
    """The vectorized common prefix of each sequence with the one before it in a given order equals the
    token-by-token definition: on random arrays sharing random prefixes, pairs that differ only at the
    last token, one a prefix of the other, equal ones and empty ones (0 for the first in the order)."""
    base = rng.integers(0, 2**31, 300)
    seqs = [base[: rng.integers(0, 300)].copy() for _ in range(40)]
    seqs += [np.concatenate([base[:k], rng.integers(0, 2**31, rng.integers(0, 5))]) for k in (0, 1, 299, 300)]
    last = base.copy()
    last[-1] += 1
    seqs += [base.copy(), last, base[:1].copy(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)]
    for _ in range(5):
        order = rng.permutation(len(seqs)).tolist()
        pairs = itertools.pairwise(order)
        want = [0] + [scalar_common_prefix(seqs[a].tolist(), seqs[b].tolist()) for a, b in pairs]
        assert adjacent_common_prefixes(seqs, order) == want
    assert adjacent_common_prefixes([base, last], [0, 1]) == [0, 299]
    assert adjacent_common_prefixes([], []) == []


def test_tree_orders_large_token_ids_like_small_ones(rng):
    """Token ids that need all four bytes (up to 2**31 - 1, and ones equal in their low bytes) build the
    same radix tree a brute-force trie compression finds, its nodes numbered in the order of the ids
    (the root's children by increasing first token): the byte keys sort requests as their ids do."""
    alphabet = np.array([2**31 - 1, 2**24, 2**24 + 1, 256, 255, 0])
    for _ in range(30):
        seqs = [alphabet[rng.integers(0, 6, rng.integers(1, 7))].tolist() for _ in range(rng.integers(2, 8))]
        tree = PrefixTree([np.array(s) for s in seqs])
        assert tree.num_nodes - 1 == brute_force_node_count(seqs)
        firsts = [int(tree.node_tokens(v)[0]) for v in range(1, tree.num_nodes) if tree.node_parent[v] == 0]
        assert firsts == sorted(firsts)


def test_paths_and_depths_follow_the_parents(rng):
    """Every request's path is the walk up from its leaf to the root (reversed), ``path_nodes`` holds
    them end to end, and every node's depth is its number of steps to the root."""
    for _ in range(20):
        seqs = [rng.integers(0, 3, rng.integers(1, 9)) for _ in range(rng.integers(1, 12))]
        tree = PrefixTree(seqs)
        for r in range(tree.num_requests):
            walk, node = [], int(tree.request_leaf[r])
            while node > 0:
                walk.append(node)
                node = int(tree.node_parent[node])
            assert tree.path(r) == tuple(walk[::-1])
            assert tree.path_nodes[tree.path_ptr[r] : tree.path_ptr[r + 1]].tolist() == walk[::-1]
        for v in range(tree.num_nodes):
            steps, node = 0, v
            while node > 0:
                steps, node = steps + 1, int(tree.node_parent[node])
            assert tree.node_depth[v] == steps


def test_networkx_view(grpo_design):
    """The tree as a DiGraph is an arborescence rooted at 0 whose node attributes count requests."""
    tree = PrefixTree([r.tokens for i in grpo_design.items for r in i.requests])
    graph = tree.to_networkx()
    assert nx.is_arborescence(graph)
    assert graph.nodes[0]["requests"] == 16
    assert sorted(d["requests"] for _, d in graph.nodes(data=True))[-2:] == [16, 16]


@pytest.mark.parametrize(
    ("spec", "packed"), [("none", 172_032), ("depth:1", 141_312), ("min_span:4096", 28_672), ("full", 26_624)]
)
def test_grpo_reference_counts(grpo_design, spec, packed):
    """DESIGN.md's GRPO shape packs to 172,032 (no sharing), 141,312 (system prompt only), 28,672
    (prompts only) and 26,624 (full sharing) tokens."""
    seqs = [r.tokens for i in grpo_design.items for r in i.requests]
    tree = PrefixTree(seqs)
    flags = np.ones(len(seqs), dtype=bool)
    layout = pack(tree, np.arange(len(seqs)), share_mask(tree, spec), flags, flags)
    assert layout.packed_tokens == packed


@pytest.mark.parametrize("spec", ["none", "depth:1", "min_span:4096", "full"])
def test_packed_metadata_reads_every_request_back(grpo_design, spec):
    """Per packed token: ids, positions, segments and parents are consistent, parents precede children,
    and each request's read-back indices return exactly its tokens at positions 0..n-1."""
    seqs = [r.tokens for i in grpo_design.items for r in i.requests]
    tree = PrefixTree(seqs)
    flags = np.ones(len(seqs), dtype=bool)
    layout = pack(tree, np.arange(len(seqs)), share_mask(tree, spec), flags, flags)
    meta = layout.token_metadata(tree)
    assert (layout.seg_parent < np.arange(layout.num_segments)).all()
    for k, s in enumerate(seqs):
        index = layout.readback(k)
        assert np.array_equal(meta["input_ids"][index], s)
        assert np.array_equal(meta["position_ids"][index], np.arange(s.size))
    parent_of_token = meta["parent_ids"]
    assert np.array_equal(parent_of_token, layout.seg_parent[meta["segment_ids"]])


def test_wave_subset_compresses_chains():
    """Packing a subset of the tree's requests merges chains that the subset no longer branches:
    one request alone is one segment whatever the layout."""
    seqs = [np.array([1, 2, 3, 4]), np.array([1, 2, 5]), np.array([1, 6])]
    tree = PrefixTree(seqs)
    flags = np.ones(3, dtype=bool)
    for spec in ("full", "none"):
        layout = pack(tree, [0], share_mask(tree, spec), flags, flags)
        assert layout.num_segments == 1 and layout.packed_tokens == 4

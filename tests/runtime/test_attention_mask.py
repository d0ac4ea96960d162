"""Tree attention masks: the dense mask follows the definition; the flex_attention BlockMask agrees."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from cpplan.bench import synthetic
from cpplan.runtime.attention_mask import (
    TreeMask,
    ancestor_table,
    flex_attention_available,
    segment_depths,
    tree_mask,
)
from cpplan.runtime.materialize import materialize_wave
from tests.support.prefix_trees import LAYOUTS, build_problem, hand_plan, prefix_workloads


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The tensors here are tiny: on shared cores, intra-op threads cost more than the arithmetic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _wave(workload, layout, cp, owner_seed):
    problem = build_problem(workload, cp=cp, chunk_tokens=4)
    plan = hand_plan(problem, layout=layout, num_waves=1, owner_seed=owner_seed)
    return materialize_wave(plan, workload, wave=0)


def _by_definition(segment_ids: list[int], seg_parent: list[int]) -> torch.Tensor:
    """Pairwise, from the words of the contract: causal inside a segment, full view of ancestors."""
    n = len(segment_ids)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        ancestors, s = set(), seg_parent[segment_ids[q]]
        while s >= 0:
            ancestors.add(s)
            s = seg_parent[s]
        for k in range(n):
            same = segment_ids[k] == segment_ids[q] and k <= q
            mask[q, k] = same or segment_ids[k] in ancestors
    return mask


@settings(max_examples=40, deadline=None)
@given(
    workload=prefix_workloads(),
    layout=st.sampled_from(LAYOUTS),
    cp=st.integers(1, 3),
    seed=st.integers(0, 99),
)
def test_dense_mask_follows_the_definition(workload, layout, cp, seed):
    """The dense tree mask equals the pairwise definition (a token sees earlier tokens of its own
    segment and every token of its ancestor segments, nothing else), and each rank's mask is the rows
    of its owned queries."""
    batches = _wave(workload, layout, cp, seed)
    b = batches[0]
    expected = _by_definition(b.segment_ids.tolist(), b.seg_parent.tolist())
    full = tree_mask(b.segment_ids, b.seg_parent)
    assert torch.equal(full, expected)
    for rank_batch in batches:
        assert torch.equal(TreeMask.for_batch(rank_batch).dense(), expected[rank_batch.packed_index])


def test_ancestor_table_and_depths():
    """Depths count parents up to the root; the table holds each segment's ancestors by depth (itself
    at its own depth) and -1 elsewhere."""
    parent = torch.tensor([-1, 0, 1, 0, -1, 4])
    assert segment_depths(parent).tolist() == [0, 1, 2, 1, 0, 1]
    assert ancestor_table(parent).tolist() == [
        [0, -1, -1],
        [0, 1, -1],
        [0, 1, 2],
        [0, 3, -1],
        [4, -1, -1],
        [4, 5, -1],
    ]


needs_flex = pytest.mark.skipif(not flex_attention_available(), reason="torch has no flex_attention")


def _tiles(dense: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (query block, key block): any entry allowed, and every entry allowed (blocks running past
    the end count padding as masked, so they are never full)."""
    rows, cols = -(-dense.shape[0] // block), -(-dense.shape[1] // block)
    padded = torch.zeros(rows * block, cols * block, dtype=torch.bool)
    padded[: dense.shape[0], : dense.shape[1]] = dense
    tiles = padded.view(rows, block, cols, block).transpose(1, 2)
    return tiles.any(-1).any(-1), tiles.all(-1).all(-1)


def _full_blocks(block_mask, rows: int, cols: int) -> torch.Tensor:
    full = torch.zeros(rows, cols, dtype=torch.bool)
    counts, indices = block_mask.full_kv_num_blocks[0, 0], block_mask.full_kv_indices[0, 0]
    for r in range(rows):
        full[r, indices[r, : int(counts[r])].long()] = True
    return full


@needs_flex
@settings(max_examples=40, deadline=None)
@given(
    workload=prefix_workloads(max_tail=30),
    layout=st.sampled_from(LAYOUTS),
    cp=st.integers(1, 3),
    seed=st.integers(0, 99),
    block=st.sampled_from((2, 4, 8, 16)),
)
@pytest.mark.slow  # block-by-block check of large masks
def test_block_mask_marks_exactly_the_allowed_blocks(workload, layout, cp, seed, block):
    """The BlockMask built from segment intervals marks a block non-empty exactly when the dense mask
    has an allowed pair in it, and full exactly when all its pairs are allowed (a block past the end is
    never full), for every rank's queries; torch's own create_block_mask over the mask_mod agrees."""
    for batch in _wave(workload, layout, cp, seed):
        mask = TreeMask.for_batch(batch)
        if mask.num_queries == 0:
            continue
        any_true, all_true = _tiles(mask.dense(), block)
        direct = mask.block_mask(block_size=block)
        assert torch.equal(direct.to_dense()[0, 0].bool(), any_true)
        assert torch.equal(_full_blocks(direct, *any_true.shape), all_true)
        oracle = mask.block_mask_from_mask_mod(block_size=block)
        assert torch.equal(oracle.to_dense(), direct.to_dense())
        for side in ("q_num_blocks", "full_q_num_blocks", "kv_num_blocks", "full_kv_num_blocks"):
            assert torch.equal(getattr(oracle, side), getattr(direct, side)), side
        for num, indices in (("q_num_blocks", "q_indices"), ("full_q_num_blocks", "full_q_indices")):
            counts = getattr(direct, num)[0, 0]
            for row in range(counts.numel()):
                n = int(counts[row])
                assert torch.equal(
                    getattr(direct, indices)[0, 0, row, :n], getattr(oracle, indices)[0, 0, row, :n]
                )
        assert torch.equal(_full_blocks(oracle, *any_true.shape), all_true)


@needs_flex
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(("layout", "rank"), [("full", 0), ("full", 1), ("none", 1), ("depth:1", 0)])
def test_flex_attention_with_block_mask_equals_dense_attention(layout, rank):
    """The mask_mod evaluated on every pair is the dense mask, and flex_attention with the BlockMask
    equals dense masked attention (float64) for a rank's queries of an agent-tree wave. (torch's CPU
    path applies the mask_mod to every pair; the block lists are checked by the test above.)"""
    from torch.nn.attention.flex_attention import create_mask, flex_attention

    wl = synthetic.agent_trees(num_trees=2, depth=3, branching=2, turn_tokens=(10, 40), seed=1)
    mask = TreeMask.for_batch(_wave(wl, layout, 2, 7)[rank])
    dense = mask.dense()
    assert torch.equal(
        create_mask(mask.mask_mod(), None, None, mask.num_queries, mask.num_keys), dense[None, None]
    )
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, mask.num_queries, 8, dtype=torch.float64, generator=g)
    k = torch.randn(1, 2, mask.num_keys, 8, dtype=torch.float64, generator=g)
    v = torch.randn(1, 2, mask.num_keys, 8, dtype=torch.float64, generator=g)
    got = flex_attention(q, k, v, block_mask=mask.block_mask(block_size=16))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)

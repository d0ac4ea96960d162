"""Group sizes chosen by a dynamic-CP pool's makespan (cpplan/planners/block_sizes.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cpplan.planners.block_sizes import Blocks, block_makespan, makespan_placement, makespan_sizes

SIZES = (1, 2, 4)

SIX_TREES_S = np.array(
    [
        [2.235, 1.396, 0.780],
        [2.470, 1.530, 0.851],
        [2.027, 1.273, 0.719],
        [2.165, 1.355, 0.759],
        [2.703, 1.664, 0.921],
        [2.401, 1.492, 0.830],
    ]
)
"""Six agent trees alone at group sizes 1, 2 and 4 (seconds; the bench suite's, at 40 GiB)."""


def _makespan(seconds: np.ndarray, blocks: Blocks, placed: np.ndarray) -> float:
    """The block makespan of a placement, each item at its block's size."""
    column = {g: k for k, g in enumerate(SIZES)}
    load = np.zeros(blocks.num_blocks)
    for item, b in enumerate(placed.tolist()):
        load[b] += seconds[item, column[int(blocks.size[b])]]
    return block_makespan(blocks, load)


def test_blocks_of_a_pool_of_four_nest_pairs_in_the_whole():
    """Four GPUs at sizes 1, 2, 4: four single GPUs, two pairs each over two of them, and one block of
    four over the pairs, the largest size the top."""
    blocks = Blocks.of(4, SIZES)
    assert blocks.size.tolist() == [1, 1, 1, 1, 2, 2, 4]
    assert blocks.children == ((), (), (), (), (0, 1), (2, 3), (4, 5))
    assert blocks.top == (6,)


def test_a_block_runs_after_its_slowest_child():
    """A pair starts when the later of its two GPUs ends, the whole pool when the later pair ends."""
    blocks = Blocks.of(4, SIZES)
    load = np.array([2.0, 3.0, 1.0, 0.0, 0.5, 2.5, 1.0])
    # pair 0: max(2, 3) + 0.5 = 3.5; pair 1: max(1, 0) + 2.5 = 3.5; the whole: 3.5 + 1
    assert block_makespan(blocks, load) == pytest.approx(4.5)
    assert block_makespan(Blocks.of(4, (1, 2)), load[:6]) == pytest.approx(3.5)


def test_four_trees_alone_then_two_on_pairs_beat_every_uniform_size():
    """Six trees on four GPUs: every tree at one size finishes at 4.377 s or later (two pairs of three
    trees at size 2); four trees alone on a GPU each, then one tree on each pair, finish at 3.866 s."""
    blocks, placed = makespan_placement(SIX_TREES_S, SIZES, 4)
    sizes = makespan_sizes(SIX_TREES_S, SIZES, 4)
    assert sizes == [int(blocks.size[b]) for b in placed]
    assert sorted(sizes) == [1, 1, 1, 1, 2, 2]
    assert _makespan(SIX_TREES_S, blocks, placed) == pytest.approx(3.866)
    best_uniform = min(
        _makespan(SIX_TREES_S, blocks, np.array(p))
        for g in SIZES
        for p in itertools.product(np.flatnonzero(blocks.size == g).tolist(), repeat=6)
    )
    assert best_uniform == pytest.approx(4.377)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_placement_is_the_least_makespan_of_every_placement(seed):
    """On five items with random seconds (some not fitting a GPU alone) the placement found has the
    least makespan of all 7^5 placements on four GPUs."""
    rng = np.random.default_rng(seed)
    one = rng.uniform(1.0, 3.0, 5)
    seconds = np.stack([one, one * rng.uniform(0.55, 0.7, 5), one * rng.uniform(0.3, 0.4, 5)], axis=1)
    seconds[rng.integers(0, 5), 0] = np.inf
    blocks, placed = makespan_placement(seconds, SIZES, 4)
    column = {g: k for k, g in enumerate(SIZES)}
    fits = [
        [b for b in range(blocks.num_blocks) if np.isfinite(seconds[i, column[int(blocks.size[b])]])]
        for i in range(5)
    ]
    least = min(_makespan(seconds, blocks, np.array(p)) for p in itertools.product(*fits))
    assert _makespan(seconds, blocks, placed) == pytest.approx(least)
    assert all(b in fits[i] for i, b in enumerate(placed.tolist()))


def test_an_item_that_fits_no_size_gives_no_sizes():
    """An item with no finite seconds at any size: nothing to place."""
    seconds = SIX_TREES_S.copy()
    seconds[2] = np.inf
    assert makespan_sizes(seconds, SIZES, 4) is None

"""Dynamic CP topologies: the pool, its group sizes, and the cards resolved per group size."""

from __future__ import annotations

import pytest

from cpplan import Topology
from cpplan.errors import InputError, UnsupportedTopologyError
from cpplan.spec.card import ModelCard


def test_pool_and_group_sizes():
    """``dp=2, cp=4, dynamic_cp`` is a pool of 8 GPUs whose waves take group sizes 1, 2, 4 or 8; a
    fixed topology has one group size, its ``cp``; a group is the fixed topology of that size on the
    same pool (``dp = pool / size``)."""
    topology = Topology(dp=2, cp=4, dynamic_cp=True)
    assert topology.pool == 8 and topology.group_sizes() == (1, 2, 4, 8)
    assert Topology(dp=2, cp=4).group_sizes() == (4,)
    group = topology.group(2)
    assert (group.cp, group.dp, group.pool, group.dynamic_cp) == (2, 4, 8, False)


def test_parse_and_print_the_flag():
    """``dynamic_cp=1`` in a topology string sets the flag, and the topology prints it back."""
    topology = Topology.parse("dp=2,cp=4,dynamic_cp=1")
    assert topology.dynamic_cp and str(topology).endswith(",dynamic_cp=1")
    assert not Topology.parse("dp=2,cp=4,dynamic_cp=false").dynamic_cp
    with pytest.raises(InputError, match="dynamic_cp='maybe'"):
        Topology.parse("cp=2,dynamic_cp=maybe")


def test_a_pool_that_groups_do_not_tile_is_named():
    """A pool that is not a multiple of every group size (dp=3 x cp=4 = 12 GPUs: no group of 8 tiles
    it) is refused, naming the pool and the group size it cannot hold."""
    with pytest.raises(InputError, match=r"dp=3 x cp=4 = 12 is not a multiple of group size 8"):
        Topology.create(dp=3, cp=4, dynamic_cp=True)
    assert Topology.create(dp=3, cp=4).pool == 12  # fixed CP: no group sizes to tile


def test_group_cards_resolve_each_size(qwen36):
    """The card resolved for a dynamic pool prices each group size as its own topology (the memory
    floors and times of CP g), and says which size it cannot price."""
    card = qwen36.resolve(Topology(dp=2, cp=4, dynamic_cp=True))
    for size in (1, 2, 4, 8):
        group = card.group_card(size)
        assert group.topology.cp == size
        fixed = qwen36.resolve(Topology(cp=size, dp=8 // size))
        assert (group.term_bytes == fixed.term_bytes).all() and group.wave_overhead_s == fixed.wave_overhead_s
    limited = ModelCard.model_validate({**qwen36.model_dump(), "supports": "pp == 1 and cp <= 4"})
    with pytest.raises(UnsupportedTopologyError, match="cannot price dynamic CP group size 8"):
        limited.resolve(Topology(dp=2, cp=4, dynamic_cp=True)).group_card(8)

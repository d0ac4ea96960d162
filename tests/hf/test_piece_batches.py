"""A rank's attention pieces run in few batched calls, each query still seeing exactly its key path.

:mod:`cpplan.hf.piece_batches` groups pieces into padded batches; these tests check the grouping's
own rules and that the batched tree attention equals attention computed piece by piece (float64, the
explicit softmax over each piece's path), on zigzag- and randomly owned waves whose pieces have many shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cpplan.hf.attention import WaveMasks, tree_attention
from cpplan.hf.geometry import WaveGeometry
from cpplan.hf.piece_batches import SLACK, bucket_pieces, piece_batches
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from cpplan.runtime.materialize import materialize_wave
from tests.support.hf_models import mixed_workload, plan, scattered, zigzag


class _Heads:
    """What tree attention reads of an attention module: 4 query heads over 2 KV heads."""

    num_key_value_groups = 2
    scaling = 0.125


@pytest.fixture(scope="module")
def workload():
    """GRPO groups, a multi-turn chain with a duplicate and a lone request."""
    return mixed_workload(0)


def _geometry(workload, cp: int, *, chunked: bool | str) -> WaveGeometry:
    result = plan(workload, cp)
    owned = scattered(result, cp) if chunked == "scattered" else zigzag(result, cp) if chunked else result
    return WaveGeometry.build(materialize_wave(owned, workload, wave=0))


def test_every_piece_in_one_batch_within_slack():
    """Every piece lands in exactly one batch, and a batch of more than one piece pads its query x key
    area to at most SLACK times its pieces' own area."""
    rng = np.random.default_rng(0)
    queries = rng.integers(1, 300, 60)
    keys = queries + rng.integers(0, 900, 60)
    groups = bucket_pieces(queries, keys)
    assert sorted(i for g in groups for i in g) == list(range(60))
    for group in groups:
        own = int((queries[group] * keys[group]).sum())
        padded = len(group) * int(queries[group].max()) * int(keys[group].max())
        assert len(group) == 1 or padded <= SLACK * own


def test_equal_completions_share_one_call():
    """GRPO completions of one length run as one call: two prompts (297 and 347 tokens) with 8
    completions of 64 each are 18 pieces and 2 calls (the prompts, the completions: each padded within
    the slack)."""
    rows = [
        RolloutRow(prompt=tuple(range(3 + p, 300 + 50 * p)), completion=tuple(range(10 + g, 74 + g)))
        for p in range(2)
        for g in range(8)
    ]
    workload, _ = grouped_workload(rows, keep_empty=False)
    geo = _geometry(workload, 1, chunked=False)
    found = piece_batches(geo, 0, torch.device("cpu"))
    assert (geo.keys[0].num_pieces, len(found.batches)) == (18, 2)


@pytest.mark.parametrize(("cp", "chunked"), [(1, False), (2, True), (4, True), (8, "scattered")])
def test_batched_equals_piece_by_piece(workload, cp, chunked):
    """Batched tree attention gives every rank's queries the output of attention over their own piece's
    key path alone (causal, aligned bottom-right), to 1e-12 in float64."""
    geo = _geometry(workload, cp, chunked=chunked)
    gen = torch.Generator().manual_seed(cp)
    keys = torch.randn(2, geo.packed_tokens, 8, generator=gen, dtype=torch.float64)
    values = torch.randn(2, geo.packed_tokens, 8, generator=gen, dtype=torch.float64)
    masks = WaveMasks(geo)
    for rank in range(cp):
        q = torch.randn(4, int(geo.keys[rank].rows_cu[-1]), 8, generator=gen, dtype=torch.float64)
        got = tree_attention(_Heads(), q, keys, values, geo, rank, "torch", masks)
        assert torch.allclose(got, _piece_by_piece(q, keys, values, geo, rank), rtol=0, atol=1e-12)


def _piece_by_piece(q, keys, values, geo, rank: int) -> torch.Tensor:
    """The explicit softmax of each piece's queries over its path, GQA groups of 2."""
    keys, values = keys.repeat_interleave(2, 0), values.repeat_interleave(2, 0)
    rows_cu, outs = geo.keys[rank].rows_cu, []
    for i in range(geo.keys[rank].num_pieces):
        lo, hi = int(rows_cu[i]), int(rows_cu[i + 1])
        path = torch.as_tensor(geo.piece_keys(rank, i))
        scores = q[:, lo:hi] @ keys[:, path].transpose(-1, -2) * _Heads.scaling
        shift = path.numel() - (hi - lo)
        visible = torch.ones(hi - lo, path.numel(), dtype=torch.bool).tril(shift)
        outs.append(scores.masked_fill(~visible, float("-inf")).softmax(-1) @ values[:, path])
    return torch.cat(outs, dim=1)

"""Head-parallel Gated DeltaNet under CP: no state crosses ranks, two all-to-alls per layer.

Each rank holds the projected and convolved ``q``, ``k``, ``v`` and the gate inputs ``a``, ``b`` of
the tokens it owns, for every head. One all-to-all (:meth:`~cpplan.runtime.comm.SimulatedComm.all_to_all`)
sends every rank the whole packed wave's rows of *its* heads: rank ``r`` owns value heads
``r * H / cp .. (r + 1) * H / cp - 1`` (``H``, the layer's value heads, must be a multiple of the CP
size) and receives the key heads those read (query/key head ``h`` serves value heads ``h * group ..
h * group + group - 1``; a key head serving value heads on two ranks goes to both). Each rank then runs
the gated delta rule over the whole wave for its heads, segment by segment along the prefix tree (a
root segment from a zero state, a child from its parent's final state; every segment of one tree level
in one call), and a second all-to-all returns each token's outputs to the rank that owns it, the heads
concatenated in rank order. The conv (with its tails, :func:`cpplan.hf.gdn.conv_with_tails`), the
decay ``g = -exp(A_log) softplus(a + dt_bias)``, ``beta = sigmoid(b)``, the gated norm and the output
projection are elementwise per head or per token, so the result equals the other two modes; both
all-to-alls are differentiable (their backward is the all-to-all of the gradients the other way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from cpplan.hf.delta_rule import compute_dtype, gated_delta_rule


@dataclass(frozen=True, kw_only=True, eq=False)
class HeadShards:
    """Which heads each CP rank runs: ``values[r]``, its value heads (a contiguous range);
    ``keys[r]``, the distinct key heads they read; ``key_of_value[r]``, for each of its value heads,
    the position of its key head in ``keys[r]``."""

    values: tuple[np.ndarray, ...]
    keys: tuple[np.ndarray, ...]
    key_of_value: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, num_value_heads: int, num_key_heads: int, num_ranks: int) -> HeadShards:
        """The shards of a layer with ``num_value_heads`` value and ``num_key_heads`` key heads over
        ``num_ranks`` ranks; a :class:`ValueError` when the value heads do not divide evenly."""
        if num_value_heads % num_ranks:
            raise ValueError(
                f"head-parallel GDN needs the value heads to divide evenly over the CP ranks: "
                f"{num_value_heads} value heads (key heads {num_key_heads}) over CP size {num_ranks}"
            )
        assert num_value_heads % num_key_heads == 0, (num_value_heads, num_key_heads)
        group = num_value_heads // num_key_heads
        per_rank = num_value_heads // num_ranks
        values, keys, key_of_value = [], [], []
        for r in range(num_ranks):
            heads = np.arange(r * per_rank, (r + 1) * per_rank)
            needed, position = np.unique(heads // group, return_inverse=True)
            values.append(heads)
            keys.append(needed)
            key_of_value.append(position.reshape(-1))
        return cls(values=tuple(values), keys=tuple(keys), key_of_value=tuple(key_of_value))

    def width(self, r: int, head_k_dim: int, head_v_dim: int) -> int:
        """Columns per token of the rows rank ``r`` receives: ``q`` and ``k`` of its key heads, ``v``,
        ``a`` and ``b`` of its value heads."""
        return 2 * self.keys[r].size * head_k_dim + self.values[r].size * (head_v_dim + 2)


def tree_levels(seg_parent: np.ndarray) -> np.ndarray:
    """Each segment's depth in the prefix tree (0 for a root; parents precede their children)."""
    depth = np.zeros(seg_parent.size, dtype=np.int64)
    for s, parent in enumerate(seg_parent.tolist()):
        if parent >= 0:
            assert parent < s, "a segment's parent precedes it"
            depth[s] = depth[parent] + 1
    return depth


def segment_initial_state(parent: int, finals: dict, zero: torch.Tensor) -> torch.Tensor:
    """The state a segment starts from: its parent's final state (zero for a root, ``parent < 0``)."""
    return finals[parent] if parent >= 0 else zero


def head_parallel_core(gdn, convolved: dict, hs: dict, geo, comm, *, kernels: str = "auto") -> dict:
    """Each local rank's ``(T_r, value heads, value dim)`` core outputs from its convolved ``q | k | v``
    rows and its normed states ``hs[r]`` (for the gate inputs), the recurrence run head-parallel."""
    shards = HeadShards.of(gdn.num_v_heads, gdn.num_k_heads, geo.num_ranks)
    dk, dv = gdn.head_k_dim, gdn.head_v_dim
    sends = {r: _head_blocks(gdn, convolved[r], hs[r], shards) for r in comm.ranks}
    shapes = {d: [(geo.counts[s], shards.width(d, dk, dv)) for s in range(geo.num_ranks)] for d in comm.ranks}
    received = comm.all_to_all(sends, shapes)
    to_packed = torch.as_tensor(np.argsort(geo.rank_major, kind="stable"))
    outputs = {}
    for d in comm.ranks:
        rows = torch.cat(received[d])
        rows = rows[to_packed.to(rows.device)]
        out = _run_heads(gdn, rows, shards, d, geo, kernels)  # (packed, heads of d, dv)
        out = out[torch.as_tensor(geo.rank_major, device=out.device)]
        outputs[d] = list(torch.split(out.flatten(1), list(geo.counts)))
    back_shapes = {
        s: [(geo.counts[s], shards.values[d].size * dv) for d in range(geo.num_ranks)] for s in comm.ranks
    }
    back = comm.all_to_all(outputs, back_shapes)
    return {s: torch.cat([b.unflatten(-1, (-1, dv)) for b in back[s]], dim=1) for s in comm.ranks}


def _head_blocks(gdn, convolved: torch.Tensor, hs: torch.Tensor, shards: HeadShards) -> list[torch.Tensor]:
    """One rank's rows for every destination rank: ``[q | k | v | a | b]`` of that rank's heads."""
    q, k, v = torch.split(convolved, [gdn.key_dim, gdn.key_dim, gdn.value_dim], dim=-1)
    q, k = q.unflatten(-1, (-1, gdn.head_k_dim)), k.unflatten(-1, (-1, gdn.head_k_dim))
    v = v.unflatten(-1, (-1, gdn.head_v_dim))
    a, b = gdn.in_proj_a(hs), gdn.in_proj_b(hs)
    dtype = convolved.dtype
    blocks = []
    for keys, values in zip(shards.keys, shards.values, strict=True):
        kk, vv = torch.as_tensor(keys, device=q.device), torch.as_tensor(values, device=q.device)
        parts = [q[:, kk].flatten(1), k[:, kk].flatten(1), v[:, vv].flatten(1), a[:, vv], b[:, vv]]
        blocks.append(torch.cat([p.to(dtype) for p in parts], dim=-1))
    return blocks


def _run_heads(gdn, rows: torch.Tensor, shards: HeadShards, d: int, geo, kernels: str) -> torch.Tensor:
    """The gated delta rule over the whole packed wave for rank ``d``'s heads (``rows`` in packed
    order), tree level by tree level; ``(packed, heads of d, value dim)``."""
    dk, dv = gdn.head_k_dim, gdn.head_v_dim
    num_keys, num_values = shards.keys[d].size, shards.values[d].size
    q, k, v, a, b = torch.split(
        rows, [num_keys * dk, num_keys * dk, num_values * dv, num_values, num_values], dim=-1
    )
    expand = torch.as_tensor(shards.key_of_value[d], device=rows.device)
    q = q.unflatten(-1, (num_keys, dk))[:, expand]
    k = k.unflatten(-1, (num_keys, dk))[:, expand]
    v = v.unflatten(-1, (num_values, dv))
    heads = torch.as_tensor(shards.values[d], device=rows.device)
    g = -gdn.A_log[heads].float().exp() * F.softplus(a.float() + gdn.dt_bias[heads])
    beta = b.sigmoid()
    zero = v.new_zeros((num_values, dk, dv), dtype=compute_dtype(v.dtype))
    finals: dict[int, torch.Tensor] = {}
    placed, parts = [], []
    levels = tree_levels(geo.seg_parent)
    for level in range(int(levels.max()) + 1 if levels.size else 0):
        segments = np.flatnonzero(levels == level)
        offsets, lengths = geo.seg_offset[segments], geo.seg_length[segments]
        index = np.concatenate([np.arange(o, o + n) for o, n in zip(offsets, lengths, strict=True)])
        at = torch.as_tensor(index, device=rows.device)
        initial = torch.stack([segment_initial_state(int(p), finals, zero) for p in geo.seg_parent[segments]])
        cu = np.r_[0, np.cumsum(lengths)].tolist()
        out, final = gated_delta_rule(
            q[at], k[at], v[at], g[at], beta[at], cu_seqlens=cu, initial_state=initial, kernels=kernels
        )
        finals.update(zip(segments.tolist(), final, strict=True))
        placed.append(index)
        parts.append(out)
    order = torch.as_tensor(np.argsort(np.concatenate(placed), kind="stable"), device=rows.device)
    return torch.cat(parts)[order]


__all__ = ["HeadShards", "head_parallel_core", "segment_initial_state", "tree_levels"]

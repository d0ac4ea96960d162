"""Parallel state passing for Gated DeltaNet under CP: every rank runs at once, one exchange per layer.

The gated delta rule is affine in its initial state. Per head, a piece of tokens ``t = 1 .. n`` maps
the state before it to the state after it as

    S_out = A S_in + B,   A = F_n ... F_1,   F_t = (I - beta_t k_t k_t^T) exp(g_t)

where ``B`` is the final state from a zero initial state. ``A`` is itself a final state: the columns of
``S`` evolve independently, so running the recurrence with zero values from the identity
(``key dim x key dim``) gives ``A``. As fla's CP and LASP-2 do, each rank

1. runs its pieces from a zero state, and from the identity with zero values (``B`` and ``A``);
2. composes the maps along its own chains of pieces (a piece whose state source is on the same rank):
   ``A* = A A*_src``, ``B* = A B*_src + B``, mapping the state before the chain's head to the state
   after the piece;
3. publishes ``[A* | B*]`` of every piece a piece on another rank starts from (one all-gather per
   layer, through :mod:`cpplan.runtime.comm`, so gradients flow back through it);
4. resolves every published piece's true final state in packed order (``S = A* S_head + B*``, the
   head's source being another published piece, or none: then ``S = B*``), the same on every rank;
5. reruns every piece that does not start from zero from its true initial state (one batched call).

Pieces starting from zero (a root segment's first piece) keep their step-1 outputs. Everything is
autograd-differentiable; in float64 it equals the rounds of :func:`cpplan.hf.gdn.recurrence` to
rounding (``docs/hf.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cpplan.hf.delta_rule import compute_dtype, gated_delta_rule


@dataclass(frozen=True, kw_only=True, eq=False)
class ParallelPlan:
    """Index bookkeeping of parallel state passing over a wave's pieces (packed order, as
    :class:`~cpplan.hf.geometry.Pieces`). ``head``: the first piece of each piece's same-rank chain
    (itself when its source is remote or absent). ``has_successor``: some piece starts from its final
    state. ``published``: the pieces some piece on another rank starts from, owner-major (the order of
    the exchange)."""

    head: np.ndarray
    has_successor: np.ndarray
    published: np.ndarray

    @classmethod
    def of(cls, pieces) -> ParallelPlan:
        """From a wave's :class:`~cpplan.hf.geometry.Pieces`."""
        pred, owner = pieces.pred, pieces.owner
        head = np.arange(pieces.count)
        for i in range(pieces.count):  # a piece's source precedes it in packed order
            p = pred[i]
            if p >= 0 and owner[p] == owner[i]:
                head[i] = head[p]
        has_pred = pred >= 0
        has_successor = np.zeros(pieces.count, dtype=bool)
        has_successor[pred[has_pred]] = True
        remote = has_pred & (owner != owner[np.maximum(pred, 0)])
        published = np.unique(pred[remote])
        published = published[np.argsort(owner[published], kind="stable")]
        return cls(head=head, has_successor=has_successor, published=published)


def parallel_recurrence(gdn, heads: dict, geo, comm, *, kernels: str = "auto") -> dict:
    """The gated delta rule over every rank's pieces with the states passed in parallel (one publish
    per layer); returns each rank's ``(T_r, value heads, value dim)`` core outputs."""
    pieces = geo.pieces
    plan = ParallelPlan.of(pieces)
    some = heads[comm.ranks[0]]
    dtype = compute_dtype(some[2].dtype)
    shape = (gdn.num_v_heads, gdn.head_k_dim)
    zero = some[2].new_zeros((*shape, gdn.head_v_dim), dtype=dtype)
    eye = torch.eye(gdn.head_k_dim, dtype=dtype, device=zero.device).expand(*shape, -1)
    maps: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}  # piece -> (A*, B*); A* None: no input
    outputs: dict[int, list] = {r: [] for r in comm.ranks}
    for r in comm.ranks:
        maps.update(_local_maps(r, heads[r], geo, plan, zero, eye, outputs[r], kernels))
    finals = _resolve(plan, pieces, _publish_maps(plan, pieces, maps, comm, geo, zero, eye))
    for r in comm.ranks:
        _rerun(r, heads[r], geo, plan, maps, finals, zero, outputs[r], kernels)
    out = {}
    for r in comm.ranks:
        ordered = sorted(outputs[r], key=lambda item: item[0])
        out[r] = torch.cat([o for _, o in ordered]) if ordered else heads[r][2]
    return out


def _local_maps(r: int, heads, geo, plan: ParallelPlan, zero, eye, outputs: list, kernels: str) -> dict:
    """Steps 1 and 2 on rank ``r``: the outputs of its pieces that start from zero, and ``(A*, B*)`` of
    every piece of it some piece starts from."""
    pieces = geo.pieces
    mine = np.flatnonzero(pieces.owner == r)
    from_zero = mine[pieces.pred[mine] < 0]
    needed = mine[plan.has_successor[mine]]
    run_b = np.union1d(from_zero, needed)
    b_states = {}
    if run_b.size:
        out, final = _run(run_b, heads, geo, [zero] * run_b.size, kernels)
        b_states = dict(zip(run_b.tolist(), final, strict=True))
        for i, (start, o) in zip(run_b.tolist(), out, strict=True):
            if pieces.pred[i] < 0:
                outputs.append((start, o))
    run_a = needed[pieces.pred[needed] >= 0]
    a_states = {}
    if run_a.size:
        q, k, v, g, beta = heads
        no_values = (q, k, v.new_zeros((v.shape[0], v.shape[1], eye.shape[-1])), g, beta)
        _, final = _run(run_a, no_values, geo, [eye] * run_a.size, kernels)
        a_states = dict(zip(run_a.tolist(), final, strict=True))
    maps: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}
    for i in needed.tolist():
        p = int(pieces.pred[i])
        if p < 0:
            maps[i] = (None, b_states[i])
        elif pieces.owner[p] != r:
            maps[i] = (a_states[i], b_states[i])
        else:
            a_src, b_src = maps[p]
            a = a_states[i]
            maps[i] = (None if a_src is None else a @ a_src, a @ b_src + b_states[i])
    return maps


def _publish_maps(plan: ParallelPlan, pieces, maps: dict, comm, geo, zero, eye) -> dict:
    """Step 3: every published piece's ``(A*, B*)`` as every rank received it (one publish)."""
    if not plan.published.size:
        return {}
    width = eye.shape[-1]
    owners = pieces.owner[plan.published]
    rows = {}
    for r in comm.ranks:
        mine = plan.published[owners == r].tolist()
        rows[r] = (
            torch.stack([torch.cat([_or_zero(maps[i][0], eye), maps[i][1]], dim=-1) for i in mine])
            if mine
            else zero.new_zeros((0, *eye.shape[:-1], width + zero.shape[-1]))
        )
    received = comm.publish(rows, np.bincount(owners, minlength=geo.num_ranks).tolist())
    return {
        i: (received[slot, ..., :width], received[slot, ..., width:])
        for slot, i in enumerate(plan.published.tolist())
    }


def _or_zero(a: torch.Tensor | None, eye: torch.Tensor) -> torch.Tensor:
    """``A*``, or zeros where the chain starts from a zero state (its ``A*`` then multiplies zero)."""
    return torch.zeros_like(eye) if a is None else a


def _resolve(plan: ParallelPlan, pieces, received: dict) -> dict:
    """Step 4: the true final state of every published piece, in packed order."""
    finals = {}
    for i in sorted(received):
        a, b = received[i]
        source = int(pieces.pred[plan.head[i]])
        assert source < 0 or source in finals, "a chain's remote source is published and precedes it"
        finals[i] = b if source < 0 else a @ finals[source] + b
    return finals


def _initial_state(i: int, pieces, plan: ParallelPlan, maps: dict, finals: dict, zero) -> torch.Tensor:
    """The true state piece ``i`` starts from: its source's final state, read from the resolved
    published pieces or composed from its same-rank chain's map."""
    p = int(pieces.pred[i])
    if p < 0:
        return zero
    if pieces.owner[p] != pieces.owner[i]:
        return finals[p]
    a, b = maps[p]
    source = int(pieces.pred[plan.head[p]])
    return b if source < 0 else a @ finals[source] + b


def _rerun(r: int, heads, geo, plan, maps, finals, zero, outputs: list, kernels: str) -> None:
    """Step 5: rank ``r``'s pieces that do not start from zero, from their true initial states."""
    pieces = geo.pieces
    mine = np.flatnonzero(pieces.owner == r)
    rerun = mine[pieces.pred[mine] >= 0]
    if not rerun.size:
        return
    states = [_initial_state(i, pieces, plan, maps, finals, zero) for i in rerun.tolist()]
    out, _ = _run(rerun, heads, geo, states, kernels)
    outputs.extend(out)


def _run(chosen: np.ndarray, heads, geo, states: list, kernels: str):
    """:func:`run_pieces` from a list of states."""
    return run_pieces(chosen, heads, geo, torch.stack(states), kernels)


def run_pieces(chosen: np.ndarray, heads, geo, initial_state: torch.Tensor, kernels: str):
    """The rule over pieces ``chosen`` of one rank (one batched call) from ``initial_state`` (one state
    per piece): each piece's ``(local start row, outputs)`` and the final states."""
    pieces = geo.pieces
    starts = geo.local[pieces.start[chosen]]
    lengths = pieces.end[chosen] - pieces.start[chosen]
    rows = torch.as_tensor(
        np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    )
    q, k, v, g, beta = (x[rows.to(x.device)] for x in heads)
    cu = np.r_[0, np.cumsum(lengths)].tolist()
    out, final = gated_delta_rule(
        q, k, v, g, beta, cu_seqlens=cu, initial_state=initial_state, kernels=kernels
    )
    parts = [(int(starts[n]), out[cu[n] : cu[n + 1]]) for n in range(chosen.size)]
    return parts, final


__all__ = ["ParallelPlan", "parallel_recurrence"]

"""Kernel fields of a RankBatch: pieces, key paths and state sources are all a GPU kernel needs.

The attention and recurrence checks below read only the kernel fields (plus the owned tokens'
``packed_index`` and ``input_ids`` and the requests' read-back positions, to place and compare
results): no segment tree, no ``cpplan.hf`` geometry.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cpplan
from cpplan.runtime.attention_mask import TreeMask
from tests.support.hf_models import mixed_workload, plan, scattered, zigzag
from tests.support.prefix_trees import LAYOUTS, build_problem, hand_plan, prefix_workloads

SETTINGS = settings(max_examples=30, deadline=None)
DIM = 4
TAPS = 3


def _hand_plans(data, workload):
    """A hand-built plan: CP 1-8, any layout, chunk owners at random or the contiguous split."""
    cp = data.draw(st.sampled_from((1, 2, 4, 8)), label="cp")
    problem = build_problem(workload, cp=cp, chunk_tokens=data.draw(st.sampled_from((1, 3, 8))))
    return hand_plan(
        problem,
        layout=data.draw(st.sampled_from(LAYOUTS), label="layout"),
        num_waves=1,
        owner_seed=data.draw(st.none() | st.integers(0, 2**16), label="owner_seed"),
    )


def _wave_inputs(batches) -> np.ndarray:
    """The token id at every packed position, from the ranks' owned tokens."""
    ids = np.zeros(batches[0].packed_tokens, dtype=np.int64)
    for b in batches:
        ids[b.packed_index.numpy()] = b.input_ids.numpy()
    return ids


def _request_tokens(workload, label) -> np.ndarray:
    item, index = label
    return workload.items[workload.index_of[item]].requests[index].tokens


def _pieces(batch):
    """Per piece: its owned rows and its key path, from the kernel fields alone."""
    q_cu = batch.piece_cu_seqlens.tolist()
    k_cu = batch.attn_k_cu_seqlens.tolist()
    keys = batch.attn_k_index
    return [
        (slice(q_cu[i], q_cu[i + 1]), keys[k_cu[i] : k_cu[i + 1]]) for i in range(batch.piece_segment.numel())
    ]


def _varlen_attention(q, k, v, batch) -> torch.Tensor:
    """What flash-attention varlen with ``causal=True`` computes over (piece_cu_seqlens,
    attn_k_cu_seqlens): query ``i`` of a piece with ``n`` queries and ``m`` keys sees keys ``j <= m - n
    + i`` (bottom-right alignment)."""
    out = torch.zeros_like(q)
    for rows, path in _pieces(batch):
        scores = q[rows] @ k[path].T
        n, m = scores.shape
        visible = torch.ones(n, m, dtype=torch.bool).tril(m - n)
        out[rows] = scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v[path]
    return out


def _check_attention(batches) -> None:
    gen = torch.Generator().manual_seed(0)
    n = batches[0].packed_tokens
    q, k, v = (torch.randn(n, DIM, generator=gen, dtype=torch.float64) for _ in range(3))
    allowed = TreeMask.build(batches[0].segment_ids, batches[0].seg_parent).dense()
    want = (q @ k.T).masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    for b in batches:
        index = b.packed_index
        got = _varlen_attention(q[index], k, v, b)
        torch.testing.assert_close(got, want[index], rtol=1e-12, atol=1e-12)


class _Recurrence:
    """A causal conv of ``TAPS`` taps, then a gated linear recurrence with a matrix state, over
    per-token inputs drawn from each token id: order-sensitive in both the conv and the state."""

    def __init__(self, vocab: int) -> None:
        gen = torch.Generator().manual_seed(1)
        self.embed = torch.randn(vocab, DIM, generator=gen, dtype=torch.float64)
        self.weight = torch.randn(TAPS, DIM, generator=gen, dtype=torch.float64)
        self.decay = torch.rand(vocab, generator=gen, dtype=torch.float64) * 0.5 + 0.4

    def conv(self, windows: torch.Tensor) -> torch.Tensor:
        """``(tokens, TAPS, DIM)`` embedded windows (zeros before a path's start) to conv outputs."""
        return (windows * self.weight).sum(1)

    def run(self, ids: torch.Tensor, x: torch.Tensor, state: torch.Tensor):
        """Outputs and final state of tokens ``ids`` with conv outputs ``x`` from ``state``."""
        outs = []
        for t in range(ids.numel()):
            state = self.decay[ids[t]] * state + torch.outer(x[t], x[t].roll(1))
            outs.append(state @ x[t])
        return (torch.stack(outs) if outs else x), state

    def alone(self, tokens: np.ndarray) -> torch.Tensor:
        """One request run from a zero state and zero conv padding."""
        ids = torch.as_tensor(tokens)
        padded = torch.cat([torch.zeros(TAPS - 1, DIM, dtype=torch.float64), self.embed[ids]])
        windows = padded.unfold(0, TAPS, 1).transpose(1, 2)
        return self.run(ids, self.conv(windows), torch.zeros(DIM, DIM, dtype=torch.float64))[0]

    def piece(self, ids_at: np.ndarray, rows_ids: torch.Tensor, path: torch.Tensor, state):
        """A piece: its conv windows are the ``TAPS`` keys ending at each query in its key path (the
        keys before the first query are its conv tail)."""
        n, m = rows_ids.numel(), path.numel()
        padded = torch.cat([torch.zeros(TAPS - 1, DIM, dtype=torch.float64), self.embed[ids_at[path]]])
        windows = padded.unfold(0, TAPS, 1).transpose(1, 2)[m - n :]
        return self.run(rows_ids, self.conv(windows), state)


def _check_recurrence(batches, workload) -> None:
    ids_at = torch.as_tensor(_wave_inputs(batches))
    model = _Recurrence(int(ids_at.max()) + 1 if ids_at.numel() else 1)
    zero = torch.zeros(DIM, DIM, dtype=torch.float64)
    finals: dict[tuple[int, int], torch.Tensor] = {}
    packed_out = torch.full((batches[0].packed_tokens, DIM), float("nan"), dtype=torch.float64)
    pending = [(b.rank, i) for b in batches for i in range(b.piece_segment.numel())]
    while pending:  # run every piece whose state source has run (any order the sources allow)
        ready = []
        for r, i in pending:
            source = (int(batches[r].state_source_rank[i]), int(batches[r].state_source_piece[i]))
            if source[0] < 0 or source in finals:
                ready.append((r, i, zero if source[0] < 0 else finals[source]))
        assert ready, "state sources form a cycle"
        for r, i, state in ready:
            b = batches[r]
            rows, path = _pieces(b)[i]
            out, finals[(r, i)] = model.piece(ids_at, b.input_ids[rows], path, state)
            packed_out[b.packed_index[rows]] = out
            pending.remove((r, i))
    for k, label in enumerate(batches[0].requests):
        want = model.alone(_request_tokens(workload, label))
        torch.testing.assert_close(packed_out[batches[0].readback(k)], want, rtol=1e-12, atol=1e-12)


def _check_structure(batches) -> None:
    """Pieces are the maximal runs of consecutive packed positions of one segment in owned order;
    dtypes and maxima are as documented."""
    for b in batches:
        assert b.piece_cu_seqlens.dtype == torch.int32 and b.attn_k_cu_seqlens.dtype == torch.int32
        for name in ("piece_segment", "attn_k_index", "state_source_rank", "state_source_piece"):
            assert getattr(b, name).dtype == torch.int64
        index, segment = b.packed_index.numpy(), b.segment_ids.numpy()
        cu = b.piece_cu_seqlens.numpy()
        assert cu[0] == 0 and cu[-1] == b.num_tokens and np.all(np.diff(cu) > 0)
        cut = np.flatnonzero((np.diff(index) != 1) | (np.diff(segment[index]) != 0)) + 1
        assert np.array_equal(cu, np.r_[0, cut, index.size] if index.size else [0])
        assert np.array_equal(b.piece_segment.numpy(), segment[index[cu[:-1]]])
        q_len, k_len = np.diff(cu), np.diff(b.attn_k_cu_seqlens.numpy())
        assert b.max_seqlen_q == int(q_len.max(initial=0)) and b.max_seqlen_k == int(k_len.max(initial=0))
        for rows, path in _pieces(b):
            assert torch.equal(path[path.numel() - (rows.stop - rows.start) :], b.packed_index[rows])


@SETTINGS
@given(workload=prefix_workloads(), data=st.data())
def test_kernel_fields_on_random_prefix_trees(workload, data):
    """On random prefix trees (CP 1, 2, 4; every layout, with and without sharing; random or
    contiguous ownership): varlen attention over (pieces, key paths) equals the tree-masked attention,
    and a conv + linear recurrence run piece by piece from the named state sources, reading each conv
    tail from the key path, equals every request run alone."""
    batches = cpplan.materialize_wave(_hand_plans(data, workload), workload, wave=0)
    _check_structure(batches)
    _check_attention(batches)
    _check_recurrence(batches, workload)


@pytest.mark.parametrize(
    ("cp", "ownership"),
    [(1, "planned"), (2, "planned"), (2, "zigzag"), (4, "zigzag"), (8, "planned"), (8, "scattered")],
)
def test_kernel_fields_on_planned_waves(cp, ownership):
    """The same two properties on the planner's own plans of a mixed workload (GRPO groups sharing
    prompts, a prefix chain, a duplicate), planned or with chunks dealt in a zigzag or at random."""
    workload = mixed_workload(scale=0.3)
    result = plan(workload, cp)
    owned = {"zigzag": zigzag, "scattered": scattered}
    result = owned[ownership](result, cp) if ownership in owned else result
    batches = cpplan.materialize_wave(result, workload, wave=0)
    assert sum(int((b.state_source_rank >= 0).sum()) for b in batches) > 0
    _check_structure(batches)
    _check_attention(batches)
    _check_recurrence(batches, workload)


def _unshared_wave(cp: int, layout: str):
    workload = cpplan.Workload(
        items=(
            cpplan.Item(
                id="a", requests=(cpplan.Request(tokens=[1, 2, 3, 4, 5]), cpplan.Request(tokens=[1, 2, 6]))
            ),
            cpplan.Item(id="b", requests=(cpplan.Request(tokens=[7, 8, 9, 1, 2, 3, 4]),)),
        )
    )
    problem = build_problem(workload, cp=cp, chunk_tokens=2)
    return workload, cpplan.materialize_wave(
        hand_plan(problem, layout=layout, num_waves=1, owner_seed=3), workload, wave=0
    )


@pytest.mark.parametrize("cp", [1, 2])
def test_packed_seq_params_without_sharing(cp):
    """Without sharing, the PackedSeqParams dict gives the pieces as query sequences and the key paths
    as kv sequences; at CP 1 both are the requests themselves."""
    workload, batches = _unshared_wave(cp, "none")
    for b in batches:
        params = b.packed_seq_params()
        assert params["qkv_format"] == "thd"
        assert torch.equal(params["cu_seqlens_q"], b.piece_cu_seqlens)
        assert torch.equal(params["cu_seqlens_kv"], b.attn_k_cu_seqlens)
        assert (params["max_seqlen_q"], params["max_seqlen_kv"]) == (b.max_seqlen_q, b.max_seqlen_k)
    if cp == 1:
        (b,) = batches
        assert torch.equal(b.piece_cu_seqlens, b.attn_k_cu_seqlens)
        lengths = sorted(np.diff(b.piece_cu_seqlens.numpy()).tolist())
        assert lengths == sorted(len(_request_tokens(workload, label)) for label in b.requests)


def test_packed_seq_params_refuses_sharing():
    """A wave whose segments share a prefix has overlapping key paths: packed_seq_params refuses it
    with a ValueError naming the shared segment and the fields to use instead."""
    _, batches = _unshared_wave(1, "full")
    with pytest.raises(ValueError, match=r"shares prefixes.*attn_k_index"):
        batches[0].packed_seq_params()


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_block_mask_runs_the_tree_mask():
    """flex_attention (eager, CPU) with ``batch.block_mask()`` over a rank's queries and every packed key
    equals the tree-masked attention; each call builds a new mask (nothing is cached on the batch)."""
    from torch.nn.attention.flex_attention import flex_attention

    workload = mixed_workload(scale=0.3)
    batches = cpplan.materialize_wave(zigzag(plan(workload, 2), 2), workload, wave=0)
    gen = torch.Generator().manual_seed(0)
    n = batches[0].packed_tokens
    q, k, v = (torch.randn(1, 1, n, 16, generator=gen) for _ in range(3))
    allowed = TreeMask.build(batches[0].segment_ids, batches[0].seg_parent).dense()
    want = (q[0, 0] @ k[0, 0].T / 4).masked_fill(~allowed, float("-inf")).softmax(-1) @ v[0, 0]
    for b in batches:
        mask = b.block_mask(block_size=128)
        assert mask is not b.block_mask(block_size=128)
        got = flex_attention(q[:, :, b.packed_index], k, v, block_mask=mask, scale=0.25)
        torch.testing.assert_close(got[0, 0], want[b.packed_index], rtol=1e-5, atol=1e-5)


def test_documented_figure_draws_a_real_wave():
    """docs/make_kernel_fields_figure.py draws a real wave showing every kind of state source: a zero
    state, one from the same rank and one from the other rank, and key paths through a shared prefix."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "make_kernel_fields_figure.py"
    spec = importlib.util.spec_from_file_location("make_kernel_fields_figure", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    batches = module.example()
    kinds = set()
    for b in batches:
        for r in b.state_source_rank.tolist():
            kinds.add("zero" if r < 0 else "same" if r == b.rank else "other")
    assert kinds == {"zero", "same", "other"}
    assert any(int(np.diff(b.attn_k_cu_seqlens.numpy()).max()) > b.max_seqlen_q for b in batches)
    _check_attention(batches)

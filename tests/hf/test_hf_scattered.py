"""cpplan.hf runs any chunk ownership exactly at CP 8: ranks owning scattered chunks (drawn at random,
or the proposers' balanced split free of ranges) give every request's log-probs and every parameter
gradient of the unpacked run, in each GDN hand-off mode (rounds, parallel, head-parallel) and on the
attention-only family.

Float64 inside :func:`cpplan.hf.float64_internals`; tolerances as in ``test_hf_packed.py``: log-probs
within 1e-9 absolute, every parameter's gradient within 1e-8 of its largest entry.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers

import cpplan
from cpplan.api import build_problem
from cpplan.gpu_check.tiny_models import tiny_config
from cpplan.hf.geometry import WaveGeometry
from cpplan.pricing.wave import balanced_ownership, price_wave
from tests.hf.test_hf_gdn_handoff import _alone, _packed
from tests.support.hf_models import (
    CARD,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    scattered,
    slow_decay,
    tiny_model,
    with_gdn_handoff,
)

LOGPROBS = 1e-9
GRADS = 1e-8
CP = 8


@pytest.fixture(scope="module")
def workload() -> cpplan.Workload:
    """GRPO groups, a multi-turn prefix chain with a duplicate, and a lone request (~2.6K packed)."""
    return mixed_workload(0)


def _shared(workload) -> cpplan.Plan:
    """Every item in one wave at CP 8 under full sharing (the system prompt and each group's prompt
    stored once, children starting from their parents' states), priced by the proposers' pricing."""
    problem = build_problem(workload, topology=cpplan.Topology(cp=CP), model=CARD, memory_bytes=80 * 2**30)
    items = tuple(range(problem.num_items))
    wave = price_wave(problem, items, problem.pack(items, "full"), "full")
    assert (wave.layout.seg_parent >= 0).any()
    return cpplan.Plan(strategy="full_sharing", waves=(wave,))


def _scattered_pieces(result, workload) -> None:
    """The wave's ownership is really scattered: some rank owns chunks out of order, and some rank
    holds two separate pieces of one segment."""
    owner = result.waves[0].owner
    assert (np.diff(owner) < 0).any()
    pieces = WaveGeometry.build(cpplan.materialize_wave(result, workload, wave=0)).pieces
    pairs = set()
    repeated = False
    for segment, rank in zip(pieces.segment.tolist(), pieces.owner.tolist(), strict=True):
        repeated |= (segment, rank) in pairs
        pairs.add((segment, rank))
    assert repeated


def _check(model, result, workload) -> None:
    want, want_grads = _alone(model, workload)
    logprobs, grads = _packed(model, result, workload)
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff(grads, want_grads) <= GRADS


@pytest.mark.parametrize("mode", ["rounds", "parallel"])
def test_random_ownership_in_each_state_passing_mode(workload, mode):
    """Chunks owned at random at CP 8 on the hybrid MoE model (GDN states decaying slowly enough to
    carry across pieces), states passed in rounds or in parallel: packed equals each request alone."""
    result = scattered(_shared(workload), CP, seed=7)
    _scattered_pieces(result, workload)
    _check(slow_decay(tiny_model("qwen3_5_moe")), with_gdn_handoff(result, mode), workload)


def test_random_ownership_attention_only(workload):
    """Chunks owned at random at CP 8 on the attention-only dense family: packed equals unpacked."""
    result = scattered(_shared(workload), CP, seed=4)
    _scattered_pieces(result, workload)
    _check(tiny_model("qwen3"), result, workload)


def _eight_head_model():
    """The tiny hybrid MoE model with 8 value heads over 4 key heads per GDN layer, so that its heads
    divide over 8 ranks (head-parallel at CP 8), states decaying slowly."""
    config = tiny_config("qwen3_5_moe")
    config.linear_num_value_heads, config.linear_num_key_heads = 8, 4
    return slow_decay(transformers.Qwen3_5MoeForCausalLM(config).double().eval())


def test_random_ownership_head_parallel(workload):
    """Chunks owned at random at CP 8, GDN layers run head-parallel (one value head per rank): packed
    equals each request alone."""
    result = scattered(_shared(workload), CP, seed=5)
    _scattered_pieces(result, workload)
    _check(_eight_head_model(), with_gdn_handoff(result, "head_parallel"), workload)


def test_balanced_split_free_of_ranges_runs_exactly(workload):
    """The wave under the proposers' balanced split free of ranges (longest first to the least-loaded
    rank) at CP 8, in the hand-off mode its pricing chooses and in the other two: packed equals each
    request alone."""
    shared = _shared(workload)
    wave = shared.waves[0]
    problem = build_problem(workload, topology=cpplan.Topology(cp=CP), model=CARD, memory_bytes=80 * 2**30)
    owner = balanced_ownership(problem, wave.stats)
    priced = price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner)
    balanced = cpplan.Plan(strategy="balanced", waves=(priced,))
    _scattered_pieces(balanced, workload)
    model = _eight_head_model()
    _check(model, balanced, workload)
    for mode in sorted({"rounds", "parallel", "head_parallel"} - {priced.gdn_handoff}):
        _check(model, with_gdn_handoff(balanced, mode), workload)

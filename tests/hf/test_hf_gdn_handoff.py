"""Parallel GDN state passing (:mod:`cpplan.hf.gdn_parallel`) is exact, and cpplan.hf runs the mode the
plan's wave names (``gdn_handoff``).

Float64 inside :func:`cpplan.hf.float64_internals`; tolerances as in ``test_hf_packed.py``: log-probs
within 1e-9 absolute, every parameter's gradient within 1e-8 of its largest entry (observed: 8.9e-16
and ~1e-12 against each request alone, ~3e-13 between the two modes).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cpplan
import cpplan.hf.gdn_parallel as parallel_module
from cpplan.hf import float64_internals, packed_logprobs, unpacked_logprobs
from cpplan.hf.gdn_parallel import ParallelPlan
from cpplan.hf.geometry import WaveGeometry
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.runtime.comm import SimulatedComm
from tests.support.hf_models import (
    VOCAB,
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    random_tree_workload,
    slow_decay,
    tiny_model,
    weighted_sum,
    with_gdn_handoff,
    zigzag,
)

LOGPROBS = 1e-9
GRADS = 1e-8
FAMILY = "qwen3_5_moe"


def long_workload() -> cpplan.Workload:
    """One long sequence and a short one: at CP 4 the long one spans every rank."""
    rng = np.random.default_rng(7)
    requests = [cpplan.Request(tokens=rng.integers(0, VOCAB, n).tolist()) for n in (1500, 90)]
    items = tuple(cpplan.Item(id=f"s{k}", requests=(r,)) for k, r in enumerate(requests))
    return cpplan.Workload(items=items)


@pytest.fixture(scope="module")
def model():
    """The tiny hybrid MoE model (GDN and attention layers), its recurrent states decaying slowly enough
    to carry across whole pieces (:func:`~tests.support.hf_models.slow_decay`)."""
    return slow_decay(tiny_model(FAMILY))


def _alone(model, workload):
    with float64_internals():
        logprobs = unpacked_logprobs(model, workload)
        return logprobs, gradients(model, weighted_sum(logprobs))


def _packed(model, result, workload):
    with float64_internals():
        logprobs = packed_logprobs(model, result, workload, wave=0)
        return logprobs, gradients(model, weighted_sum(logprobs))


CASES = [
    ("mixed", 2, "planned"),
    ("mixed", 4, "planned"),
    ("mixed", 2, "zigzag"),
    ("mixed", 4, "zigzag"),
    ("long", 4, "planned"),
    ("tree", 4, "zigzag"),
]


WORKLOADS = {
    "mixed": lambda: mixed_workload(0),
    "long": long_workload,
    "tree": lambda: random_tree_workload(2, scale=300),
}


def _case(name: str, cp: int, ownership: str):
    workload = WORKLOADS[name]()
    result = plan(workload, cp)
    return workload, result if ownership == "planned" else zigzag(result, cp)


@pytest.mark.parametrize(("name", "cp", "ownership"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_parallel_equals_rounds_and_each_request_alone(model, name, cp, ownership):
    """With the states passed in parallel, every request's log-probs and every parameter gradient of a
    weighted sum of them equal each request run alone and the sequential rounds (GRPO groups, a prefix
    chain, a lone request; one long sequence across every rank; a random prefix tree; planned ranges
    and zigzag chunks at CP 2 and 4), and pieces really continue states from other ranks: where the
    ownership cuts a request more than once (the long sequence, zigzag chunks), some published map
    composes a chain that itself starts from another rank's state."""
    workload, result = _case(name, cp, ownership)
    pieces = WaveGeometry.build(cpplan.materialize_wave(result, workload, wave=0)).pieces
    run = ParallelPlan.of(pieces)
    assert run.published.size > 0
    multi_hop = (pieces.pred[run.head[run.published]] >= 0).any()
    # Planned ranges of short requests cut each at most once (CP 2, or the mixed workload at CP 4);
    # the long sequence and every zigzag case must compose chains across several ranks.
    assert multi_hop or (ownership == "planned" and (cp == 2 or name == "mixed"))
    want, want_grads = _alone(model, workload)
    rounds, rounds_grads = _packed(model, with_gdn_handoff(result, "rounds"), workload)
    logprobs, grads = _packed(model, with_gdn_handoff(result, "parallel"), workload)
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff(grads, want_grads) <= GRADS
    assert max_abs_diff(logprobs, rounds) <= LOGPROBS
    assert max_rel_grad_diff(grads, rounds_grads) <= GRADS


def _no_composition(plan_, pieces, received):
    return {i: b for i, (_, b) in received.items()}


def _zero_inits(i, pieces, plan_, maps, finals, zero):
    return zero


FAULTS = {
    "a published map not composed with its source": ("_resolve", _no_composition),
    "reruns from a zero state": ("_initial_state", _zero_inits),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_wrong_state_passing_breaks_equality(model, monkeypatch, fault):
    """The parallel path is what runs, and every step of it matters: resolving a published piece
    without its source's state, or rerunning from zero, moves the log-probs far beyond the tolerance
    (CP 4, zigzag; measured 0.03 and 0.08)."""
    workload, result = _case("mixed", 4, "zigzag")
    want, _ = _alone(model, workload)
    monkeypatch.setattr(parallel_module, *FAULTS[fault])
    with float64_internals(), torch.no_grad():
        logprobs = packed_logprobs(model, with_gdn_handoff(result, "parallel"), workload, wave=0)
    assert max_abs_diff(logprobs, want) > 1e-3


def _state_publishes(monkeypatch, model, result, workload) -> list[int]:
    """The last dimension of every recurrent-state publish (4-D rows) of one forward."""
    seen = []
    real = SimulatedComm.publish

    def spy(self, rows, counts):
        out = real(self, rows, counts)
        if out.dim() == 4:
            seen.append(int(out.shape[-1]))
        return out

    monkeypatch.setattr(SimulatedComm, "publish", spy)
    with torch.no_grad():
        packed_logprobs(model, result, workload, wave=0)
    return seen


def test_hf_runs_the_mode_the_plan_names(model, monkeypatch):
    """A wave whose plan says ``"parallel"`` (a Plan object or plan JSON) exchanges states once per GDN
    layer, ``[A | B]`` maps of ``key dim + value dim`` columns; ``"rounds"``, or plan JSON without the
    field, exchanges ``value dim`` states once per round after which a state crosses (more than one
    per layer here); a value outside the modes is refused."""
    workload, result = _case("mixed", 4, "zigzag")
    gdn = next(layer.linear_attn for layer in model.model.layers if hasattr(layer, "linear_attn"))
    num_gdn = sum(hasattr(layer, "linear_attn") for layer in model.model.layers)
    geo = WaveGeometry.build(cpplan.materialize_wave(result, workload, wave=0))
    rounds_per_layer = sum(h.size > 0 for h in geo.pieces.handoffs)
    assert rounds_per_layer > 1
    parallel = with_gdn_handoff(result, "parallel")
    want_parallel = [gdn.head_k_dim + gdn.head_v_dim] * num_gdn
    assert _state_publishes(monkeypatch, model, parallel, workload) == want_parallel
    want_rounds = [gdn.head_v_dim] * (num_gdn * rounds_per_layer)
    assert _state_publishes(monkeypatch, model, with_gdn_handoff(result, "rounds"), workload) == want_rounds
    as_json = plan_to_dict(plan(workload, 4).problem, parallel)
    assert [w["gdn_handoff"] for w in as_json["waves"]] == ["parallel"]
    assert _state_publishes(monkeypatch, model, as_json, workload) == want_parallel
    del as_json["waves"][0]["gdn_handoff"]
    assert _state_publishes(monkeypatch, model, as_json, workload) == want_rounds
    as_json["waves"][0]["gdn_handoff"] = "ring"
    with pytest.raises(cpplan.InputError, match="gdn_handoff"):
        packed_logprobs(model, as_json, workload, wave=0)

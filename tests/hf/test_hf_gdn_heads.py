"""Head-parallel GDN (:mod:`cpplan.hf.gdn_heads`) is exact, and cpplan.hf runs it where the plan's wave
says ``gdn_handoff = "head_parallel"``.

Float64 inside :func:`cpplan.hf.float64_internals`; tolerances as in ``test_hf_gdn_handoff.py``:
log-probs within 1e-9 absolute, every parameter's gradient within 1e-8 of its largest entry (observed:
8.9e-16 and ~6e-15 against each request alone).
"""

from __future__ import annotations

import pytest
import torch

import cpplan
import cpplan.hf.gdn_heads as heads_module
from cpplan.hf import float64_internals, packed_logprobs
from cpplan.hf.gdn_heads import HeadShards
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.runtime.comm import SimulatedComm
from tests.hf.test_hf_gdn_handoff import _alone, _case, _packed
from tests.support.hf_models import (
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    slow_decay,
    tiny_model,
    with_gdn_handoff,
)

LOGPROBS = 1e-9
GRADS = 1e-8
CASES = [
    ("mixed", 2, "planned"),
    ("mixed", 4, "zigzag"),
    ("long", 4, "planned"),
    ("tree", 4, "zigzag"),
]


@pytest.fixture(scope="module")
def model():
    """The tiny hybrid MoE model (4 value and 2 key heads per GDN layer), its states decaying slowly
    enough to carry across whole segments."""
    return slow_decay(tiny_model("qwen3_5_moe"))


@pytest.mark.parametrize(("name", "cp", "ownership"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_head_parallel_equals_each_request_alone_and_the_other_modes(model, name, cp, ownership):
    """Run head-parallel, every request's log-probs and every parameter gradient of a weighted sum of
    them equal each request run alone, the rounds and parallel state passing (GRPO groups, a prefix
    chain, a lone request; one long sequence across every rank; a random prefix tree; planned ranges
    and zigzag chunks; CP 2, where each rank runs two value heads of one key head, and CP 4, where two
    ranks read the same key head)."""
    workload, result = _case(name, cp, ownership)
    want, want_grads = _alone(model, workload)
    logprobs, grads = _packed(model, with_gdn_handoff(result, "head_parallel"), workload)
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff(grads, want_grads) <= GRADS
    for other in ("rounds", "parallel"):
        found, found_grads = _packed(model, with_gdn_handoff(result, other), workload)
        assert max_abs_diff(logprobs, found) <= LOGPROBS
        assert max_rel_grad_diff(grads, found_grads) <= GRADS


def test_children_start_from_their_parents_state(model, monkeypatch):
    """The tree's state sources still apply head-parallel: start every child segment from a zero state
    instead of its parent's and the log-probs move far beyond the tolerance."""
    workload, result = _case("mixed", 4, "zigzag")
    want, _ = _alone(model, workload)
    monkeypatch.setattr(heads_module, "segment_initial_state", lambda parent, finals, zero: zero)
    with float64_internals(), torch.no_grad():
        logprobs = packed_logprobs(model, with_gdn_handoff(result, "head_parallel"), workload, wave=0)
    assert max_abs_diff(logprobs, want) > 1e-3


def test_head_shards_split_value_heads_and_send_key_heads_where_read():
    """Value heads split into contiguous equal ranges; each rank gets the key heads its value heads
    read (grouped as transformers' Qwen3.5: key head h serves value heads h*group .. h*group+group-1),
    one key head going to two ranks when the ranks outnumber the key heads."""
    two = HeadShards.of(4, 2, 2)
    assert [v.tolist() for v in two.values] == [[0, 1], [2, 3]]
    assert [k.tolist() for k in two.keys] == [[0], [1]]
    four = HeadShards.of(4, 2, 4)
    assert [k.tolist() for k in four.keys] == [[0], [0], [1], [1]]
    qwen = HeadShards.of(32, 16, 8)
    assert [k.tolist() for k in qwen.keys][3] == [6, 7]
    assert [p.tolist() for p in qwen.key_of_value][3] == [0, 0, 1, 1]
    assert qwen.width(0, 128, 128) == 2 * 2 * 128 + 4 * 130


def test_heads_not_dividing_over_the_ranks_is_a_clear_error(model):
    """Four value heads over three CP ranks: a ValueError naming the heads and the CP size, before any
    collective."""
    with pytest.raises(ValueError, match=r"4 value heads \(key heads 2\) over CP size 3"):
        HeadShards.of(4, 2, 3)
    workload = mixed_workload(0)
    result = with_gdn_handoff(plan(workload, 3), "head_parallel")
    with pytest.raises(ValueError, match="CP size 3"), torch.no_grad():
        packed_logprobs(model, result, workload, wave=0)


def _exchanges(monkeypatch, model, result, workload) -> tuple[int, list[int]]:
    """The all-to-alls and the last dimension of every recurrent-state publish (4-D rows) of one
    forward."""
    seen_a2a, seen_states = [], []
    real_publish, real_a2a = SimulatedComm.publish, SimulatedComm.all_to_all

    def publish(self, rows, counts):
        out = real_publish(self, rows, counts)
        if out.dim() == 4:
            seen_states.append(int(out.shape[-1]))
        return out

    def all_to_all(self, sends, shapes):
        seen_a2a.append(1)
        return real_a2a(self, sends, shapes)

    monkeypatch.setattr(SimulatedComm, "publish", publish)
    monkeypatch.setattr(SimulatedComm, "all_to_all", all_to_all)
    with torch.no_grad():
        packed_logprobs(model, result, workload, wave=0)
    return len(seen_a2a), seen_states


def test_hf_runs_head_parallel_where_the_plan_names_it(model, monkeypatch):
    """A wave whose plan (object or JSON) says ``"head_parallel"`` makes two all-to-alls per GDN layer
    and hands over no recurrent state; the same wave in rounds makes no all-to-all."""
    workload, result = _case("mixed", 4, "zigzag")
    num_gdn = sum(hasattr(layer, "linear_attn") for layer in model.model.layers)
    heads = with_gdn_handoff(result, "head_parallel")
    assert _exchanges(monkeypatch, model, heads, workload) == (2 * num_gdn, [])
    as_json = plan_to_dict(plan(workload, 4).problem, heads)
    assert [w["gdn_handoff"] for w in as_json["waves"]] == ["head_parallel"]
    assert _exchanges(monkeypatch, model, as_json, workload) == (2 * num_gdn, [])
    count, states = _exchanges(monkeypatch, model, with_gdn_handoff(result, "rounds"), workload)
    assert count == 0 and states


def test_one_rank_head_parallel_is_the_unsharded_run(model):
    """At CP 1 head-parallel holds every head on the one rank and equals the rounds (nothing moves)."""
    workload = cpplan.Workload(items=mixed_workload(0).items[:2])
    result = plan(workload, 1)
    with float64_internals(), torch.no_grad():
        a = packed_logprobs(model, with_gdn_handoff(result, "head_parallel"), workload, wave=0)
        b = packed_logprobs(model, with_gdn_handoff(result, "rounds"), workload, wave=0)
    assert max_abs_diff(a, b) <= LOGPROBS

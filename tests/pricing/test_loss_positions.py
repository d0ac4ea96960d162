"""Loss masks in pricing: ``loss_tokens`` counts the owned tokens whose logits are needed, the same in the
evaluator, the plan JSON, the verifier and a token-by-token count; mask-free workloads keep the
per-segment fast path; completion-only masks need less LM-head memory."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import cpplan
from cpplan.bench import synthetic
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.quantities import QUANTITY_INDEX
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan
from tests.support.prefix_trees import LAYOUTS, build_problem, hand_plan, prefix_workloads

LOSS = QUANTITY_INDEX["loss_tokens"]


def needs_logits(request: cpplan.Request, t: int) -> bool:
    """The definition, token by token: output logits needs every token; output loss needs every token
    without a mask, and token t when the mask marks token t + 1 with one; nothing else needs any."""
    if request.output == "logits":
        return True
    if request.output != "loss":
        return False
    if request.loss_mask is None:
        return True
    return t + 1 < request.num_tokens and bool(request.loss_mask[t + 1])


def brute_loss_tokens(problem: Problem, wave) -> list[int]:
    """Per rank, the owned packed tokens some request through them needs the logits of: each request
    walked segment by segment in plain Python, each token's owner read from the chunk owners."""
    layout = wave.layout
    needed: set[int] = set()
    for k, r in enumerate(layout.request_ids.tolist()):
        request = problem.workload.items[int(problem.request_item[r])].requests[int(problem.request_index[r])]
        t = 0
        for s in layout.chain(k).tolist():
            for j in range(int(layout.seg_length[s])):
                if needs_logits(request, t):
                    needed.add(int(layout.seg_offset[s]) + j)
                t += 1
    counts = [0] * problem.topology.cp
    for p in needed:
        counts[int(wave.owner[p // problem.chunk_tokens])] += 1
    return counts


def _masked_plan(workload, data):
    problem = build_problem(
        workload,
        cp=data.draw(st.integers(1, 4), label="cp"),
        chunk_tokens=data.draw(st.sampled_from((1, 3, 8))),
    )
    plan = hand_plan(
        problem,
        layout=data.draw(st.sampled_from(LAYOUTS), label="layout"),
        num_waves=data.draw(st.integers(1, 2), label="waves"),
        owner_seed=data.draw(st.none() | st.integers(0, 2**16), label="owner_seed"),
    )
    return problem, plan


@settings(max_examples=80, deadline=None)
@given(workload=prefix_workloads(masks=True), data=st.data())
def test_masked_loss_tokens_agree_everywhere(workload, data):
    """On random prefix trees whose requests carry random loss masks (and outputs loss, logits, none),
    under every layout kind and arbitrary chunk owners: the evaluator's per-rank ``loss_tokens``, the
    plan JSON's and a token-by-token count are equal, and the verifier (which counts them itself and
    checks the claims) passes the plan."""
    problem, plan = _masked_plan(workload, data)
    data_json = plan_to_dict(problem, plan)
    for wave, wave_json in zip(plan.waves, data_json["waves"], strict=True):
        want = brute_loss_tokens(problem, wave)
        assert wave.quantities[:, LOSS].astype(int).tolist() == want
        assert [r["loss_tokens"] for r in wave_json["ranks"]] == want
    verdict = verify_plan(
        data_json, workload, problem.card, problem.memory_bytes, chunk_tokens=problem.chunk_tokens
    )
    assert verdict.valid, verdict.violations


def _grpo(masks: bool) -> cpplan.Workload:
    """Small GRPO groups; with ``masks``, completion-only masks (the tokens after the shared prompt)."""
    wl = synthetic.grpo(
        num_prompts=2, group_size=4, system_tokens=40, prompt_tokens=60, completion_tokens=(5, 30)
    )
    return _completion_only(wl) if masks else wl


def test_mask_free_workloads_keep_the_per_segment_fast_path():
    """Without a loss mask the problem holds no per-request positions and no packed layout carries
    per-token flags (every segment's loss tokens come in closed form); one masked request switches
    both on."""
    plain = build_problem(_grpo(masks=False), cp=2, chunk_tokens=8)
    assert plain.loss_positions is None
    assert all(plain.pack([i], spec).loss_spans is None for i in range(plain.num_items) for spec in LAYOUTS)
    masked = build_problem(_grpo(masks=True), cp=2, chunk_tokens=8)
    assert masked.loss_positions is not None
    assert masked.pack([0], "full").loss_spans is not None


def test_without_a_mask_every_token_counts_with_one_only_marked_targets():
    """A loss request without a mask needs the logits of every token (the head runs over the whole
    sequence); with a mask, exactly the tokens whose next token it marks (so an all-ones mask needs
    every token but the last)."""
    tokens = list(range(10))
    for mask, want in ((None, 10), ([1] * 10, 9), ([0] * 5 + [1] * 5, 5), ([1] + [0] * 9, 0)):
        wl = cpplan.Workload(
            items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=tokens, loss_mask=mask),)),)
        )
        problem = build_problem(wl, cp=1, chunk_tokens=4)
        wave = best_wave(problem, [0], ("full",))[1]
        assert int(wave.quantities[0, LOSS]) == want == brute_loss_tokens(problem, wave)[0]


HEAD_CARD = """\
[memory.terms.head]
quantity = "loss_tokens"
bytes_per_unit = "vocab * 4 + 2 * hidden * dtype_bytes + 2 * 4"
doc = "fp32 logits of every position whose logits are needed, held at once, plus the hidden state and grad"
"""


def _full_logits_card(tmp_path) -> cpplan.ModelCard:
    """The shipped Qwen3-8B card with a head that holds the fp32 logits of every needed position at
    once (a trainer without chunked cross-entropy), so the LM-head envelope binds."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "models" / "qwen3-8b.toml").read_text()
    start = text.index("[memory.terms.head]")
    end = text.index("\n[", start + 1)
    path = tmp_path / "full-logits.toml"
    path.write_text(text[:start] + HEAD_CARD + text[end:])
    return cpplan.load_model(path)


def test_completion_only_masks_need_less_head_memory(tmp_path):
    """With a head priced per needed position, the completion-only GRPO workload's whole wave peaks
    lower than the unmasked one (the head envelope binds), and at a budget between the two peaks the
    masked workload plans in one wave where the unmasked one needs more; both plans verify."""
    card = _full_logits_card(tmp_path)
    peaks = {}
    for masks in (False, True):
        wl = synthetic.grpo(
            num_prompts=4, group_size=8, system_tokens=512, prompt_tokens=4096, completion_tokens=(256, 1024)
        )
        wl = _completion_only(wl) if masks else wl
        problem = Problem.build(wl, Settings(topology=cpplan.Topology(cp=2), model=card, memory_bytes=2**40))
        wave = best_wave(problem, range(problem.num_items), ("full",))[1]
        assert problem.card.envelope_names[int(wave.prices.envelope[0])] == "head"
        peaks[masks] = (wl, wave.peak_bytes)
    assert peaks[True][1] < 0.8 * peaks[False][1]
    budget = (peaks[True][1] + peaks[False][1]) // 2
    waves = {}
    for masks, (wl, _) in peaks.items():
        result = cpplan.plan(
            wl, topology=cpplan.Topology(cp=2), model=card, memory_bytes=budget, solver="deterministic"
        )
        verdict = verify_plan(result.to_dict(), wl, result.problem.card, budget)
        assert verdict.valid, verdict.violations
        waves[masks] = result.plan.num_waves
    assert waves[True] == 1 < waves[False]


def _completion_only(wl: cpplan.Workload) -> cpplan.Workload:
    """Each request's mask marks the tokens after its item's shared prefix."""
    items = []
    for item in wl.items:
        tokens = [r.tokens for r in item.requests]
        n = min(t.size for t in tokens)
        same = (np.stack([t[:n] for t in tokens]) == tokens[0][:n]).all(axis=0)
        shared = int(np.argmin(np.r_[same, False]))
        requests = tuple(
            cpplan.Request(tokens=t, loss_mask=(np.arange(t.size) >= shared).astype(int)) for t in tokens
        )
        items.append(cpplan.Item(id=item.id, requests=requests))
    return cpplan.Workload(items=tuple(items))

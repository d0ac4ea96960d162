"""Property tests (hypothesis, bounded for CI): random workloads with shared prefixes, topologies and
budgets. Every plan any registered planner returns passes the verifier; a refusal happens only when a
single request cannot fit (an item that cannot fit whole is split instead); the numpy evaluator's price
equals a slow reference price computed token by token, for any chunk ownership."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import cpplan
from cpplan.planners import PLANNERS
from cpplan.planners.deadline import Deadline
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.evaluator import price
from cpplan.pricing.layout import pack
from cpplan.pricing.ownership import chunk_stats, rank_quantities
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave, price_wave
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan

CARDS = {name: cpplan.load_model(name) for name in ("qwen3-8b", "qwen3.6-35b-a3b")}
PROFILE = cpplan.load_solver("runtime")
BOUNDED = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _workload(seed: int, num_items: int, max_requests: int, num_prefixes: int, prefix: int, tail: int):
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 5000, rng.integers(1, prefix + 1)) for _ in range(num_prefixes)]
    items = []
    for i in range(num_items):
        requests = []
        for _ in range(int(rng.integers(1, max_requests + 1))):
            head = prefixes[int(rng.integers(len(prefixes)))] if prefixes and rng.random() < 0.8 else []
            tokens = np.concatenate([head, rng.integers(0, 5000, rng.integers(1, tail + 1))]).astype(np.int64)
            flags = {"grad": bool(rng.random() < 0.8), "output": str(rng.choice(["loss", "none", "hidden"]))}
            requests.append(cpplan.Request(tokens=tokens, **flags))
        items.append(cpplan.Item(id=f"i{i}", requests=tuple(requests)))
    return cpplan.Workload(items=tuple(items))


def _static_floor(problem: Problem) -> int:
    return math.ceil(problem.card.safety * float(problem.card.envelope_static_bytes.max()))


@st.composite
def problems(draw) -> Problem:
    """A random problem whose budget ranges from just below the largest single request's peak to
    above the peak of the whole workload in one wave (never below the static floor)."""
    workload = _workload(
        draw(st.integers(0, 2**32 - 1)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 6)),
        draw(st.integers(0, 3)),
        draw(st.integers(1, 900)),
        draw(st.integers(1, 600)),
    )
    model = draw(st.sampled_from(sorted(CARDS)))
    cp = draw(st.sampled_from([1, 2, 3, 4]))
    tp = draw(st.sampled_from([1, 2]))
    ep = draw(st.sampled_from([1, 2])) if model == "qwen3.6-35b-a3b" and (cp * tp) % 2 == 0 else 1
    topology = cpplan.Topology(cp=cp, tp=tp, ep=ep)
    layers = draw(st.integers(1, 6))
    assume(workload.num_tokens >= cp)
    roomy = Problem.build(
        workload, Settings(topology=topology, model=CARDS[model], memory_bytes=2**60, num_layers=layers)
    )
    assume(int(roomy.tree.node_length.sum()) >= cp)
    items = range(workload.num_items)
    whole = price_wave(roomy, items, roomy.pack(items, "full"), "full").peak_bytes
    single = max(
        price_wave(
            roomy,
            (0,),
            pack(roomy.tree, [r], roomy.share_mask("full"), roomy.request_grad, roomy.request_loss),
            "full",
        ).peak_bytes
        for r in range(roomy.tree.num_requests)
    )
    # Below the largest single request (refusals), between it and the whole (splits and several
    # waves), or above (one wave).
    position = draw(st.floats(-0.5, 1.2))
    budget = max(_static_floor(roomy), single + int(position * (whole - single)))
    return Problem.build(
        workload, Settings(topology=topology, model=CARDS[model], memory_bytes=budget, num_layers=layers)
    )


def _alone_fits(problem: Problem, requests: list[int]) -> bool:
    """Whether these tree requests fit one wave under some layout of the runtime profile."""
    for spec in PROFILE.greedy.layouts:
        layout = pack(
            problem.tree, requests, problem.share_mask(spec), problem.request_grad, problem.request_loss
        )
        if price_wave(problem, (0,), layout, spec).fits(problem.memory_bytes):
            return True
    return False


@pytest.mark.slow  # long hypothesis run
@BOUNDED
@given(problems())
def test_every_plan_passes_the_verifier_and_refusals_are_justified(problem: Problem):
    """Each registered planner either returns a plan the independent verifier accepts (every request
    exactly once, every token owned once, every rank within budget, cost as claimed) whose split waves
    belong only to items that fit no wave whole, or refuses naming a request that fits no wave alone;
    it refuses only if some single request cannot fit."""
    some_request_cannot_fit = not all(_alone_fits(problem, [r]) for r in range(problem.tree.num_requests))
    for name, planner in sorted(PLANNERS.items()):
        try:
            plan, _ = planner(
                problem, PROFILE, Deadline.after(PROFILE.time_budget_s, deterministic=PROFILE.deterministic)
            )
        except cpplan.NoFitError as exc:
            event(f"{name}: refused")
            assert some_request_cannot_fit, f"{name} refused although every request fits alone: {exc}"
            assert exc.needed_bytes > exc.memory_bytes == problem.memory_bytes
            if exc.request is not None:
                i = problem.workload.index_of[exc.item]
                tree_request = int(problem.item_ptr[i]) + exc.request
                assert not _alone_fits(problem, [tree_request])
            continue
        if plan is None:
            continue
        verdict = verify_plan(
            plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes
        )
        assert verdict.valid, (name, verdict.violations)
        event(f"{name}: {'split' if any(w.split for w in plan.waves) else 'no split'}")
        event(f"{name}: {'one wave' if plan.num_waves == 1 else 'several waves'}")
        assert math.isclose(verdict.cost_s, plan.cost_s, rel_tol=1e-9)
        layouts = {"greedy": PROFILE.greedy.layouts, "full_sharing": ("full",)}.get(name)
        for wave in plan.waves:
            if wave.split and layouts is not None:
                assert len(wave.items) == 1
                assert best_wave(problem, list(wave.items), layouts)[0] is None


def _reference(problem: Problem, layout, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Peak bytes and seconds per rank, counted token by token in plain Python."""
    card, cp = problem.card, problem.topology.cp
    seg_grad = [False] * layout.num_segments
    seg_loss = [False] * layout.num_segments
    for k, r in enumerate(layout.request_ids.tolist()):
        for s in layout.chain(k).tolist():
            seg_grad[s] |= bool(problem.request_grad[r])
            seg_loss[s] |= bool(problem.request_loss[r])
    tokens = []
    for s in range(layout.num_segments):
        for j in range(int(layout.seg_length[s])):
            tokens.append((s, int(layout.seg_position[s]) + j))
    packed = len(tokens)
    local = [dict.fromkeys(QUANTITY_NAMES, 0) for _ in range(cp)]
    pieces = [0] * cp
    previous = None
    for t, (s, position) in enumerate(tokens):
        rank = int(owner[t // problem.chunk_tokens])
        pieces[rank] += previous != (rank, s)
        previous = (rank, s)
        q = local[rank]
        q["tokens"] += 1
        q["grad_tokens"] += seg_grad[s]
        q["loss_tokens"] += seg_loss[s]
        q["attn_pairs"] += position + 1
        q["grad_attn_pairs"] += (position + 1) * seg_grad[s]
    peaks, seconds = [], []
    for rank in range(cp):
        q = local[rank]
        q["segments"] = pieces[rank]
        q["remote_tokens"] = packed - q["tokens"]
        envelopes = []
        for e in range(len(card.envelope_names)):
            total = float(card.envelope_static_bytes[e])
            for t in range(len(card.term_names)):
                if card.envelope_terms[e, t]:
                    total += float(card.term_bytes[t]) * q[QUANTITY_NAMES[int(card.term_quantity[t])]]
            envelopes.append(total)
        peaks.append(math.ceil(card.safety * max(envelopes)))
        seconds.append(
            sum(
                float(card.cost_seconds[c]) * q[QUANTITY_NAMES[int(card.cost_quantity[c])]]
                for c in range(len(card.cost_names))
            )
        )
    return np.array(peaks), np.array(seconds)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["full", "none", "depth:1", "min_span:64"]), st.integers(0, 2**32 - 1))
def test_evaluator_price_equals_token_by_token_reference(problem: Problem, spec: str, seed: int):
    """For a random set of items, a layout and a random (not necessarily contiguous) chunk ownership,
    the evaluator's per-rank peak bytes and seconds equal a reference counted token by token."""
    rng = np.random.default_rng(seed)
    items = sorted(
        rng.choice(problem.num_items, size=int(rng.integers(1, problem.num_items + 1)), replace=False)
    )
    layout = problem.pack(items, spec)
    stats = chunk_stats(layout, problem.chunk_tokens)
    owner = rng.integers(0, problem.topology.cp, stats.num_chunks)
    prices = price(problem.card, rank_quantities(stats, owner, problem.topology.cp))
    peaks, seconds = _reference(problem, layout, owner)
    assert np.abs(prices.peak_bytes - peaks).max() <= 1
    assert np.allclose(prices.time_s, seconds, rtol=1e-9, atol=0)

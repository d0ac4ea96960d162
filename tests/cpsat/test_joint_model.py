"""The integer model itself: its scaling, its agreement with the plain-Python evaluation of a plan,
the soundness of its proven bound, and that realized plans stay inside its per-rank bounds."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from cpplan import Item, Request, Topology, Workload, load_model, load_solver
from cpplan.bench.synthetic import agent_trees, grpo, long_tail
from cpplan.cpsat import CompiledModel, build_space, compile_model, realize, solve
from cpplan.cpsat.chunk_caps import folded_quantities
from cpplan.cpsat.columns import columns_with_items
from cpplan.cpsat.memory import memory_rows
from cpplan.cpsat.realize import capped_owner, wave_masks
from cpplan.cpsat.scaling import SCALING
from cpplan.cpsat.solve import Solution
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.cpsat_strategy import compile_for, greedy_values, plan_columns
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import full_sharing_plan, greedy_plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.evaluator import price
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.quantities import NUM_QUANTITIES, QUANTITY_INDEX
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan
from tests.support.model_plans import random_packed_plans

MODEL_PATH = Path(__file__).resolve().parents[1] / "data" / "qwen36_uncalibrated.toml"
MODEL = load_model(MODEL_PATH)
GIB = 2**30


def problem_of(workload, *, cp: int = 1, memory_bytes: int = 80 * GIB, layers: int | None = 4) -> Problem:
    return Problem.build(
        workload,
        Settings(topology=Topology(cp=cp), model=MODEL, memory_bytes=memory_bytes, num_layers=layers),
    )


def tiny_grpo(seed: int, *, items_per_prompt: bool = True):
    return grpo(
        num_prompts=3 if items_per_prompt else 2,
        group_size=2,
        system_tokens=64,
        prompt_tokens=(96, 256),
        completion_tokens=(32, 300),
        seed=seed,
        items_per_prompt=items_per_prompt,
    )


def enumerate_plans(compiled):
    """Every plan of the model's decision space: items in waves (used first, item i in a wave <= i),
    every local layout, every subset of cross-node sharing decisions, and in every wave whose items are
    exactly an exact column's (at one of the column's slots) the choice of taking that column or not."""
    space, num_waves = compiled.space, compiled.num_waves
    num_items = len(space.items)
    pairs = [
        (k, w)
        for k, node in enumerate(space.cross)
        for w in range(num_waves)
        if any(i >= w for i in node.items)
    ]
    for waves in itertools.product(*[range(min(i, num_waves - 1) + 1) for i in range(num_items)]):
        used = set(waves)
        if used != set(range(len(used))):
            continue
        for layouts in itertools.product(*[range(len(item.layouts)) for item in space.items]):
            for bits in itertools.product((False, True), repeat=len(pairs)):
                shared = {p for p, b in zip(pairs, bits, strict=True) if b}
                assignment = list(zip(waves, layouts, strict=True))
                for taken in itertools.product(*column_options(compiled, waves)):
                    yield compiled.evaluate(assignment, shared, taken)


def column_options(compiled, waves):
    """Per wave slot: ``None`` (modelled) and every exact column with exactly the slot's items."""
    options = []
    for w in range(compiled.num_waves):
        items = [i for i, ww in enumerate(waves) if ww == w]
        found = columns_with_items(compiled.columns, items) if items else []
        options.append([None, *(g for g in found if w in compiled.columns[g].slots)])
    return options


def brute_force_optimum(compiled) -> int | None:
    best = None
    for values in enumerate_plans(compiled):
        if values.feasible and (best is None or values.objective < best):
            best = values.objective
    return best


EDGE_CASES = [(3, 1, 2.5, False), (1, 2, 2.42, False), (0, 2, 2.55, True), (1, 4, 2.4, True)]


@pytest.mark.parametrize(
    ("seed", "cp", "memory_gib", "per_prompt"),
    [
        (0, 1, 2.9, True),
        (0, 1, 3.4, True),
        (1, 2, 2.7, True),
        (3, 4, 2.5, True),
        (4, 2, 2.7, False),
        *EDGE_CASES,
    ],
)
def test_bound_is_a_true_lower_bound_of_the_model(seed, cp, memory_gib, per_prompt):
    """The bound CP-SAT reports never exceeds the model's optimum found by enumerating every plan of
    the model (waves, local layouts, cross sharing, exact columns from the greedy and full-sharing
    plans) on tiny instances; when it claims optimality, its objective is that optimum. The last cases
    sit at the memory edge, where the conservative rows alone reject the greedy plan and only its
    columns admit it: the enumerated optimum is then never above greedy's value in the model."""
    problem = problem_of(
        tiny_grpo(seed, items_per_prompt=per_prompt), cp=cp, memory_bytes=int(memory_gib * GIB)
    )
    space = build_space(problem)
    greedy = greedy_plan(problem, ("full", "none"))
    columns = plan_columns(problem, space, 2, greedy, full_sharing_plan(problem))
    compiled = compile_model(problem, space, 2, columns)
    optimum = brute_force_optimum(compiled)
    assert optimum is not None
    if (seed, cp, memory_gib, per_prompt) in EDGE_CASES:
        assert greedy.num_waves <= 2
        assert not greedy_values(compiled, space, greedy, as_columns=False).feasible
        in_model = greedy_values(compiled, space, greedy)
        assert in_model.feasible and optimum <= in_model.objective
    _solution, stats = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert stats.bound_s is not None
    assert stats.bound_s <= SCALING.seconds(optimum) + 1e-9
    if stats.status == "optimal":
        assert stats.objective_s == pytest.approx(SCALING.seconds(optimum), abs=1e-9)


def test_solution_values_match_the_python_evaluation():
    """The objective CP-SAT reports for its solution equals the plain-Python evaluation of that
    solution's assignment and sharing, and that evaluation passes every memory row."""
    problem = problem_of(tiny_grpo(5), cp=2, memory_bytes=int(2.7 * GIB))
    space = build_space(problem)
    compiled = compile_model(problem, space, 3)
    solution, stats = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert stats.status == "optimal" and solution is not None
    values = compiled.evaluate(solution.assignment, set(solution.shared))
    assert values.feasible
    assert SCALING.seconds(values.objective) == pytest.approx(stats.objective_s, abs=1e-9)


def _rank_quantities(rng, num_ranks):
    q = np.zeros((num_ranks, NUM_QUANTITIES))
    tokens = rng.integers(1, 60_000, num_ranks)
    q[:, QUANTITY_INDEX["tokens"]] = tokens
    q[:, QUANTITY_INDEX["grad_tokens"]] = tokens
    q[:, QUANTITY_INDEX["loss_tokens"]] = tokens
    q[:, QUANTITY_INDEX["segments"]] = rng.integers(1, 40, num_ranks)
    q[:, QUANTITY_INDEX["remote_tokens"]] = rng.integers(0, 200_000, num_ranks) * (num_ranks > 1)
    return q


@pytest.mark.parametrize("cp", [1, 2, 8])
def test_integer_rows_never_admit_what_the_evaluator_refuses(cp):
    """At the budget edge (the smallest budget whose KiB rows admit a rank), the exact evaluator's
    peak for that rank is within the budget; one byte less and the rows refuse it. Priced at the
    model's token bound (whole chunks under CP, the exact tokens at CP1) the evaluator lands within
    0.01% of the edge: the rounding is safe and tight."""
    card = MODEL.resolve(Topology(cp=cp))
    rng = np.random.default_rng(cp)
    for _ in range(200):
        q = _rank_quantities(rng, 1)[0]
        cap = math.ceil(q[QUANTITY_INDEX["tokens"]] / CHUNK_TOKENS)
        values = {
            "tokens": int(q[QUANTITY_INDEX["tokens"]]),
            "segments": int(q[QUANTITY_INDEX["segments"]]),
            "remote_tokens": int(q[QUANTITY_INDEX["remote_tokens"]]),
            "attn_pairs": 0,
            "grad_attn_pairs": 0,
        }

        def admits(budget: int, cap=cap, values=values) -> bool:
            rows = memory_rows(card, budget, SCALING, folded=folded_quantities({"grad": True, "loss": True}))
            return all(rows.rank_kib(e, cap, values) <= rows.memory_kib for e in range(card.num_envelopes))

        lo, hi = 1, 400 * GIB
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if admits(mid) else (mid, hi)
        edge = hi
        assert admits(edge) and not admits(edge - 1)
        peak = int(price(card, q[None, :]).peak_bytes[0])
        assert peak <= edge
        full = q.copy()
        for name in ("tokens", "grad_tokens", "loss_tokens"):
            full[QUANTITY_INDEX[name]] = cap * CHUNK_TOKENS if cp > 1 else q[QUANTITY_INDEX["tokens"]]
        peak_full_chunks = int(price(card, full[None, :]).peak_bytes[0])
        assert peak_full_chunks <= edge
        assert peak_full_chunks >= edge * (1 - 1e-4), "KiB rounding should cost under 0.01% here"


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_realized_plans_stay_within_the_model_bounds(cp):
    """Each wave realized with the capped split packs at most the tokens and segment starts the model
    counted for it, owns at most the solver's per-rank chunk cap per rank, and fits exactly: the model's
    per-rank quantities bound the realized ones."""
    workload = long_tail(num_items=10, median_tokens=1500, max_tokens=4000, seed=cp)
    problem = problem_of(workload, cp=cp, memory_bytes=6 * GIB)
    space = build_space(problem)
    compiled = compile_model(problem, space, greedy_plan(problem, ("full",)).num_waves)
    solution, _stats = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert solution is not None
    values = compiled.evaluate(solution.assignment, set(solution.shared))
    capped = capped_waves(problem, space, solution)
    used = [w for w, u in enumerate(values.used) if u]
    assert sorted(capped) == used and len(used) >= (3 if cp == 1 else 1)
    for w, wave in capped.items():
        assert wave.packed_tokens <= values.totals[w]["tokens"]
        assert wave.layout.num_segments <= values.totals[w]["segments"]
        cap = math.ceil(wave.quantities[:, QUANTITY_INDEX["tokens"]].max() / CHUNK_TOKENS)
        assert cap <= solution.cap[w]
        assert wave.fits(problem.memory_bytes)


def capped_waves(problem, space, solution) -> dict:
    """Per used wave of ``solution``, the wave priced under :func:`capped_owner` (the split within the
    model's per-rank bounds), whether or not the balanced split would fit."""
    waves = {}
    for w, (items, mask) in wave_masks(problem, space, solution).items():
        layout = problem.pack(items, mask)
        owner = capped_owner(problem, solution, w, layout)
        waves[w] = price_wave(problem, items, layout, "cpsat", owner=owner)
    return waves


def random_shared_workload(rng: np.random.Generator) -> Workload:
    """Items whose requests share prefixes within and across items, end inside other requests' paths,
    repeat exactly, and mix gradient and output flags."""
    stems = [rng.integers(0, 50, int(rng.integers(1, 300))) for _ in range(3)]
    items = []
    for i in range(int(rng.integers(2, 6))):
        requests = []
        base = np.concatenate(
            [stems[int(rng.integers(0, 3))], rng.integers(0, 50, int(rng.integers(0, 200)))]
        )
        for _ in range(int(rng.integers(1, 4))):
            cut = int(rng.integers(1, base.size + 1))
            tail = rng.integers(0, 50, int(rng.integers(0, 150))) if rng.random() < 0.7 else np.zeros(0, int)
            tokens = np.concatenate([base[:cut], tail])
            first = not items and not requests  # the very first request: no gradients, no outputs
            requests.append(
                Request(
                    tokens=tokens,
                    grad=bool(rng.random() < 0.8) and not first,
                    output="loss" if rng.random() < 0.8 and not first else "none",
                )
            )
        items.append(Item(id=f"i{i}", requests=tuple(requests)))
    return Workload(items=tuple(items))


@pytest.mark.parametrize("seed", range(12))
def test_model_counts_match_packing_for_any_plan(seed):
    """For random plans of the model's space (waves, local layouts, cross sharing) on workloads with
    cross-item prefixes, requests ending mid-path and mixed flags, packing the plan gives exactly the
    packed tokens and attention pairs the model counts, and at most its segments, gradient tokens and
    loss tokens."""
    rng = np.random.default_rng(seed)
    problem = problem_of(random_shared_workload(rng), cp=2)
    for values, w, layout in random_packed_plans(problem, rng):
        totals = values.totals[w]
        lengths = layout.seg_length
        seg_pairs = lengths * layout.seg_position + lengths * (lengths + 1) // 2
        assert layout.packed_tokens == totals["tokens"]
        assert int(seg_pairs.sum()) == totals["attn_pairs"]
        assert layout.num_segments <= totals["segments"]
        assert int(lengths[layout.seg_grad].sum()) <= totals["grad_tokens"]
        assert int(lengths[layout.seg_loss].sum()) <= totals["loss_tokens"]


@pytest.mark.parametrize("seed", range(6))
def test_solver_plans_verify_with_mixed_flags(seed):
    """With some requests taking no gradients or reading no outputs (so gradient and loss tokens get
    their own per-rank bounds), the solver's plan agrees with the Python evaluation, fits the memory
    rows, and its realized plan passes the independent verifier."""
    problem = problem_of(
        random_shared_workload(np.random.default_rng(100 + seed)), cp=2, memory_bytes=int(2.8 * GIB)
    )
    space = build_space(problem)
    assert not all(space.all_flagged.values())
    compiled = compile_model(problem, space, len(space.items))
    solution, stats = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert solution is not None
    values = compiled.evaluate(solution.assignment, set(solution.shared))
    assert values.feasible and SCALING.seconds(values.objective) <= stats.objective_s + 1e-9
    plan = realize(problem, space, solution)
    verdict = verify_plan(plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations


@pytest.mark.parametrize("cp", [1, 4])
def test_greedy_hint_is_complete_and_never_beaten_by_the_answer(cp):
    """The runtime path hints every variable of the model with the greedy plan's values (the time
    variables of the objective and the exact-column choices included: every wave takes its column),
    and the solver's answer is never worse than that hint."""
    problem = problem_of(tiny_grpo(7, items_per_prompt=False), cp=cp, memory_bytes=int(2.6 * GIB))
    greedy = greedy_plan(problem, ("full", "none"))
    space = build_space(problem, extra_specs=("full", "none"))
    columns = plan_columns(problem, space, greedy.num_waves, greedy)
    compiled = compile_model(problem, space, greedy.num_waves, columns)
    values = greedy_values(compiled, space, greedy)
    assert values.feasible and all(g is not None for g in values.columns)
    compiled.add_hint(values)
    proto = compiled.model.proto
    assert sorted(proto.solution_hint.vars) == list(range(len(proto.variables)))
    objective_vars = set(proto.objective.vars)
    assert {t.index for t in compiled.objective.time} <= objective_vars
    _solution, stats = solve(compiled, load_solver("runtime").cpsat, time_limit_s=1.0)
    assert stats.objective_s is not None
    assert stats.objective_s <= SCALING.seconds(values.objective) + 1e-9


def test_an_answer_failing_re_evaluation_is_rejected(monkeypatch):
    """solve() re-evaluates the solver's answer in plain Python; if that evaluation says a memory row
    is broken, the answer is rejected (no solution, a 'rejected' status), never handed on."""
    problem = problem_of(tiny_grpo(5), cp=2, memory_bytes=int(2.7 * GIB))
    space = build_space(problem)
    compiled = compile_model(problem, space, 2)
    honest_solution, honest = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert honest_solution is not None and honest.stage_s["verify"] >= 0.0
    original = CompiledModel.evaluate

    def broken(self, assignment, shared, columns=None):
        return dataclasses.replace(original(self, assignment, shared, columns), feasible=False)

    monkeypatch.setattr(CompiledModel, "evaluate", broken)
    rejected_solution, rejected = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert rejected_solution is None and rejected.status == "unknown"
    assert "rejected" in rejected.deciding.detail


def edge_agent_problem(seed: int, memory_gib: float) -> Problem:
    """Agent trees at CP2 on the fixture card, at a budget where greedy's waves sit at the memory edge."""
    workload = agent_trees(num_trees=5, depth=3, branching=2, turn_tokens=(200, 800), seed=seed)
    return problem_of(workload, cp=2, memory_bytes=int(memory_gib * GIB))


def test_columns_admit_the_greedy_plan_at_the_memory_edge():
    """Agent trees at CP2 and 6.5 GiB: greedy packs all five trees in one wave that the exact evaluator
    accepts but the conservative per-rank rows reject, so the model without columns is infeasible.
    With the greedy plan's waves as exact columns the greedy plan is a solution of the model (priced
    no lower than its exact cost), the deterministic and runtime solves end optimal or feasible (never
    unknown or infeasible), the objective is never above greedy's value in the model, and the realized
    plan is never costlier than greedy and verifies."""
    problem = edge_agent_problem(seed=1, memory_gib=6.5)
    profile = load_solver("deterministic")
    greedy = greedy_plan(problem, profile.greedy.layouts)
    space, compiled = compile_for(problem, profile, greedy)
    assert compiled.columns and not greedy_values(compiled, space, greedy, as_columns=False).feasible
    plain = compile_model(problem, space, greedy.num_waves)
    assert solve(plain, profile.cpsat, time_limit_s=None, deterministic=True)[1].status == "infeasible"

    in_model = greedy_values(compiled, space, greedy)
    assert in_model.feasible
    in_model_s = SCALING.seconds(in_model.objective)
    assert greedy.cost_s <= in_model_s <= greedy.cost_s + 2e-6 * greedy.num_waves
    solution, stats = solve(compiled, profile.cpsat, time_limit_s=None, deterministic=True)
    assert stats.status in ("optimal", "feasible") and solution is not None
    assert stats.objective_s <= in_model_s + 1e-9 and stats.bound_s <= stats.objective_s
    plan = realize(problem, space, solution, columns=compiled.columns)
    assert plan.cost_s <= greedy.cost_s + 1e-12
    verdict = verify_plan(plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations

    runtime = load_solver("runtime").with_time_budget(2.0)
    runtime_plan, stats = cpsat_planner(problem, runtime, Deadline.after(2.0, deterministic=False))
    assert stats.status in ("optimal", "feasible") and runtime_plan is not None
    assert runtime_plan.cost_s <= greedy.cost_s + 1e-12


def test_a_slot_taking_a_column_realizes_exactly_that_wave():
    """A wave slot that takes an exact column is realized as that column's priced wave itself (same
    object: items, layout, ownership, quantities and cost unchanged, no re-packing or re-split), both
    when every slot takes one (the greedy plan, hinted as its columns, realizes to exactly the greedy
    plan) and in the solver's own answer at the memory edge."""
    problem = edge_agent_problem(seed=0, memory_gib=4.25)
    profile = load_solver("deterministic")
    greedy = greedy_plan(problem, profile.greedy.layouts)
    space, compiled = compile_for(problem, profile, greedy)
    assert greedy.num_waves >= 3
    values = greedy_values(compiled, space, greedy)
    assert all(g is not None for g in values.columns)
    solution = Solution(
        assignment=values.assignment, shared=values.shared, cap=values.cap, columns=values.columns
    )
    plan = realize(problem, space, solution, columns=compiled.columns)
    assert [id(w) for w in plan.waves] == [id(w) for w in greedy.waves]
    assert plan.cost_s == greedy.cost_s

    problem = edge_agent_problem(seed=1, memory_gib=6.5)
    greedy = greedy_plan(problem, profile.greedy.layouts)
    space, compiled = compile_for(problem, profile, greedy)
    solution, _stats = solve(compiled, profile.cpsat, time_limit_s=None, deterministic=True)
    taken = [(w, g) for w, g in enumerate(solution.columns) if g is not None]
    assert taken, "the memory-edge instance should take a column"
    plan = realize(problem, space, solution, columns=compiled.columns)
    for w, g in taken:
        assert plan.waves[w] is compiled.columns[g].wave

"""Loss masks in the joint CP-SAT model: a prefix-tree node's loss amount is the positions any request
through it needs (an upper bound for every copy of it), the model's wave totals bound the realized
waves' loss tokens, and solver plans of masked workloads verify."""

from __future__ import annotations

import numpy as np
import pytest

from cpplan import Item, Request, Workload, load_solver
from cpplan.cpsat import build_space, compile_model, realize, solve
from cpplan.cpsat.space import _tree_facts
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.wave import best_wave
from cpplan.spec.quantities import QUANTITY_INDEX
from cpplan.verifier import verify_plan
from tests.cpsat.test_joint_model import problem_of, random_shared_workload
from tests.support.model_plans import random_packed_plans

LOSS = QUANTITY_INDEX["loss_tokens"]


def masked(workload: Workload, rng: np.random.Generator) -> Workload:
    """The workload with a random loss mask on most requests (runs of zeros and ones, like prompts and
    completions or chat turns)."""
    items = []
    for item in workload.items:
        requests = []
        for r in item.requests:
            mask = None
            if rng.random() < 0.8:
                mask = np.cumsum(rng.random(r.num_tokens) < 0.05) % 2
            requests.append(Request(tokens=r.tokens, grad=r.grad, output=r.output, loss_mask=mask))
        items.append(Item(id=item.id, requests=tuple(requests)))
    return Workload(items=tuple(items))


def _problem(seed: int, **kwargs):
    rng = np.random.default_rng(seed)
    return problem_of(masked(random_shared_workload(rng), rng), cp=2, **kwargs)


@pytest.mark.parametrize("seed", range(4))
def test_node_loss_amounts_are_the_union_of_needed_positions(seed):
    """Each tree node's loss amount is, token by token, the number of its positions that some request
    through it needs the logits of."""
    problem = _problem(seed)
    tree = problem.tree
    needed = [set() for _ in range(tree.num_nodes)]
    for r, (_, _, request) in enumerate(problem.workload.requests()):
        flags = request.logits_needed()
        for v in tree.path(r):
            start = int(tree.node_start[v])
            needed[v].update(t for t in range(start, start + int(tree.node_length[v])) if flags[t])
    amounts = _tree_facts(problem).amounts[:, LOSS]
    assert amounts.tolist() == [len(s) for s in needed]
    assert problem.loss_positions is not None and not build_space(problem).all_flagged["loss"]


@pytest.mark.parametrize("seed", range(6))
def test_model_totals_bound_the_masked_loss_tokens(seed):
    """For random plans of the model's space on masked workloads, packing the plan gives exactly the
    packed tokens the model counts and at most its loss tokens."""
    rng = np.random.default_rng(seed)
    problem = _problem(seed)
    for values, w, layout in random_packed_plans(problem, rng):
        assert layout.packed_tokens == values.totals[w]["tokens"]
        assert layout.loss_spans.num_tokens <= values.totals[w]["loss_tokens"]


@pytest.mark.parametrize("seed", [200, 202, 203])
def test_solver_plans_verify_with_masks(seed):
    """At a budget between the largest item's peak and the whole workload's, the solver's plan of a
    masked workload (several waves) agrees with the Python evaluation and its realized plan passes the
    independent verifier (which counts the needed tokens itself)."""
    roomy = _problem(seed)
    single = max(best_wave(roomy, [i], ("full",))[1].peak_bytes for i in range(roomy.num_items))
    whole = best_wave(roomy, range(roomy.num_items), ("full",))[1].peak_bytes
    problem = _problem(seed, memory_bytes=(single + whole) // 2)
    space = build_space(problem)
    compiled = compile_model(problem, space, len(space.items))
    solution, _ = solve(compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True)
    assert solution is not None
    assert compiled.evaluate(solution.assignment, set(solution.shared)).feasible
    plan = realize(problem, space, solution)
    assert plan.num_waves >= 2
    verdict = verify_plan(plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations

"""One settings object, one deadline, one per-problem memo, and the portfolio's parts."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import pickle
import time

import pytest

from cpplan import InputError, NoFitError, Settings, Topology
from cpplan.baselines import cold_copy
from cpplan.planners import PLANNERS
from cpplan.planners.cpsat_strategy import cpsat_planner
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.portfolio import StrategyOutcome, run_strategy, solve
from cpplan.planners.seeded import seeded_plan
from cpplan.pricing.memo import PricingMemo
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec import profile as profile_module
from cpplan.spec import settings as settings_module
from cpplan.spec.profile import load_solver

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)


# ------------------------------------------------------------------------------------------ settings


def test_from_user_loads_and_parses_in_one_place(settings, small_grpo):
    """A card name, a size string and a topology string give the same settings as the loaded values,
    and a problem built from them reads every setting back from the settings."""
    user = Settings.from_user(topology="cp=2", model="qwen3.6-35b-a3b", memory_bytes="80GiB", num_layers=8)
    assert user == settings
    assert Settings.from_user(model=settings.model, memory_bytes=5).topology == Topology()
    problem = Problem.build(small_grpo, user)
    assert problem.settings is user
    assert (problem.topology, problem.model, problem.memory_bytes) == (
        user.topology,
        user.model,
        user.memory_bytes,
    )
    assert problem.card is user.card


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"memory_bytes": 0}, "memory"),
        ({"memory_bytes": -5}, "memory"),
        ({"memory_bytes": True}, "memory"),
        ({"memory_bytes": 1.5e9}, "memory"),
        ({"phase": "hot"}, "phase"),
        ({"topology": {"cp": 2}}, "topology"),
        ({"model": "qwen3.6-35b-a3b"}, "model"),
        ({"num_layers": "8"}, "layers"),
        ({"num_layers": True}, "layers"),
    ],
)
def test_each_bad_setting_names_its_field(settings, changes, field):
    """Every invalid value is an InputError naming the field, raised when the settings are made."""
    with pytest.raises(InputError) as info:
        dataclasses.replace(settings, **changes)
    assert info.value.field == field


def test_from_user_reports_unloadable_values_by_field(qwen36):
    """User-level values that cannot be loaded or parsed name their field too."""
    for kwargs, field in (
        ({"model": 42, "memory_bytes": 5}, "model"),
        ({"model": "no-such-card", "memory_bytes": 5}, "model"),
        ({"model": qwen36, "memory_bytes": "lots"}, "memory"),
        ({"model": qwen36, "memory_bytes": 5, "topology": "xp=2"}, "topology"),
    ):
        with pytest.raises(InputError) as info:
            Settings.from_user(**kwargs)
        assert info.value.field == field


def test_settings_are_frozen_and_resolve_the_card_once(settings):
    """Settings cannot be changed in place; the resolved card is computed once per settings object and
    is what resolving the model at those settings gives."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.phase = "warm"  # type: ignore[misc]
    assert settings.card is settings.card
    direct = settings.model.resolve(settings.topology, num_layers=8, phase="cold")
    assert settings.card.num_layers == direct.num_layers == 8
    assert (settings.card.envelope_static_bytes == direct.envelope_static_bytes).all()


def test_pickled_settings_leave_the_resolved_card_behind(settings):
    """Shipping settings to a worker process carries the five settings, not the cached card."""
    assert settings.card is not None
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings and "card" not in copy.__dict__
    assert copy.card.num_layers == settings.card.num_layers


def _undocumented_fields(cls: type) -> list[str]:
    """Names of the annotated fields of ``cls`` not followed by a string literal (a field docstring)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    missing = []
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            documented = (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
                and following.value.value.strip()
            )
            if not documented:
                missing.append(node.target.id)
    return missing


@pytest.mark.parametrize(
    "cls",
    [
        settings_module.Settings,
        profile_module.CpSatParams,
        profile_module.GreedyParams,
        profile_module.SolverProfile,
        Deadline,
        PricingMemo,
        StrategyOutcome,
    ],
)
def test_every_field_has_a_docstring(cls):
    """Every field of the settings, the solver-profile models, the deadline, the memo and the
    strategy outcome is documented by a docstring under it."""
    assert _undocumented_fields(cls) == []


def test_profile_field_docstrings_are_their_descriptions():
    """The profile models publish their field docstrings as pydantic descriptions (JSON schema)."""
    for model in (profile_module.CpSatParams, profile_module.GreedyParams, profile_module.SolverProfile):
        assert all(info.description for info in model.model_fields.values()), model.__name__


# ------------------------------------------------------------------------------------------ deadline


def test_deterministic_deadline_never_expires():
    """A deterministic deadline has unlimited time left whatever its budget, never expires, and its
    shares and reserves are itself."""
    deadline = Deadline.after(0.0, deterministic=True)
    time.sleep(0.001)
    assert deadline.deterministic and not deadline.expired()
    assert deadline.left_s() == math.inf
    assert deadline.share(0.5) is deadline and deadline.less(10.0) is deadline


def test_wall_clock_deadline_counts_down_and_shares_the_time_left():
    """A wall-clock deadline expires after its budget; a share ends at that fraction of the time left,
    a reserve that many seconds earlier, and neither moves the start the elapsed time counts from."""
    assert Deadline.after(0.0, deterministic=False).expired()
    deadline = Deadline.after(100.0, deterministic=False)
    assert not deadline.expired() and 99.0 < deadline.left_s() <= 100.0
    half = deadline.share(0.5)
    assert 49.0 < half.left_s() <= 50.0 and half.start_s == deadline.start_s
    assert deadline.less(30.0).end_s == pytest.approx(deadline.end_s - 30.0)
    assert deadline.less(200.0).expired()
    started = time.perf_counter() - 2.0
    assert Deadline.after(1.0, deterministic=False, start_s=started).expired()
    assert Deadline.after(1.0, deterministic=False, start_s=started).elapsed_s() >= 2.0


def test_seeded_strategy_starts_no_seed_after_its_deadline(small_grpo, settings):
    """The seeded strategy starts no seed once its deadline has passed, and with a deterministic
    deadline runs every seed, exactly as without one."""
    problem = Problem.build(small_grpo, settings)
    assert seeded_plan(problem, LAYOUTS, deadline=Deadline.after(0.0, deterministic=False)) is None
    every = seeded_plan(problem, LAYOUTS)
    same = seeded_plan(problem, LAYOUTS, deadline=Deadline.after(0.0, deterministic=True))
    assert every is not None and same is not None and same.cost_s == every.cost_s


def test_cpsat_strategy_skips_without_time_left(small_grpo, settings):
    """With the deadline less the realize/verify reserve already past, CP-SAT is not started and says
    so; the portfolio still returns the greedy family's plan, under the deadline it was given."""
    problem = Problem.build(small_grpo, settings)
    runtime = load_solver("runtime")
    plan, stats = cpsat_planner(problem, runtime, Deadline.after(0.0, deterministic=False))
    assert plan is None and stats.status == "skipped: no time left"
    result = solve(problem, runtime, deadline=Deadline.after(0.0, deterministic=False))
    reasons = {c.strategy: c.reason for c in result.candidates}
    assert reasons["cpsat"] == "no solution (skipped: no time left)"
    assert reasons["seeded"] == "no solution within its time"
    assert result.strategy in ("greedy", "full_sharing")


# ------------------------------------------------------------------------------------------ memo


def test_memo_is_per_problem_and_a_cold_copy_starts_empty(small_grpo, settings):
    """Each built problem has its own memo, outside equality and repr; the greedy plan, priced waves and
    share masks land there; a cold copy shares the tree but starts with an empty memo and plans the
    same."""
    problem = Problem.build(small_grpo, settings)
    other = Problem.build(small_grpo, settings)
    assert problem.memo is not other.memo
    memo_field = next(f for f in dataclasses.fields(Problem) if f.name == "memo")
    assert not (memo_field.init or memo_field.repr or memo_field.compare)
    plan = cached_greedy_plan(problem, LAYOUTS)
    assert cached_greedy_plan(problem, LAYOUTS) is plan
    assert problem.memo.greedy_plans[LAYOUTS] is plan
    assert problem.memo.priced_waves and set(problem.memo.share_masks) == set(LAYOUTS)
    assert not other.memo.greedy_plans and not other.memo.priced_waves
    cold = cold_copy(problem)
    assert cold.tree is problem.tree and cold.memo is not problem.memo
    assert not (cold.memo.greedy_plans or cold.memo.priced_waves or cold.memo.share_masks)
    again = cached_greedy_plan(cold, LAYOUTS)
    assert again is not plan and [w.items for w in again.waves] == [w.items for w in plan.waves]


def test_memo_keeps_a_refusal(qwen36, small_grpo):
    """A greedy refusal is remembered too: asking again raises the same error without planning again."""
    problem = Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=2 * 2**30)
    )
    with pytest.raises(NoFitError) as first:
        cached_greedy_plan(problem, LAYOUTS)
    with pytest.raises(NoFitError) as second:
        cached_greedy_plan(problem, LAYOUTS)
    assert second.value is first.value is problem.memo.greedy_plans[LAYOUTS]


def test_priced_waves_are_shared_between_layouts_that_pack_alike(small_grpo, settings):
    """Two layouts taking the same sharing decisions on a wave are priced once: the memo holds one
    entry for the items, whichever layout asked first."""
    problem = Problem.build(small_grpo, settings)
    best_wave(problem, [0], ("full", "min_span:1"))
    assert len([key for key in problem.memo.priced_waves if key[0] == (0,)]) == 1


# ------------------------------------------------------------------------------------------ portfolio


def test_run_strategy_records_every_kind_of_fault(small_grpo, settings):
    """One strategy's run becomes an immutable outcome: a missing backend, a refusal (kept for the
    portfolio to raise), an error and a plan, each with its note and no plan where there is none."""
    problem = Problem.build(small_grpo, settings)
    profile, deadline = load_solver("deterministic"), Deadline.after(1.0, deterministic=True)

    def refusing(problem, profile, deadline):
        raise NoFitError("too big")

    def crashing(problem, profile, deadline):
        raise KeyError("x")

    missing = run_strategy("cpsat", None, problem, profile, deadline)
    assert missing == StrategyOutcome(strategy="cpsat", note="backend not available")
    refused = run_strategy("greedy", refusing, problem, profile, deadline)
    assert refused.note == "refused: too big" and isinstance(refused.refusal, NoFitError)
    crashed = run_strategy("greedy", crashing, problem, profile, deadline)
    assert crashed.note == "raised KeyError: 'x'" and crashed.plan is None and not crashed.valid
    ran = run_strategy("greedy", PLANNERS["greedy"], problem, profile, deadline)
    assert ran.plan is not None and ran.verdict is None and ran.note == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        ran.note = "changed"  # type: ignore[misc]

"""Settings: validated once, loaded from user values in one place; every config field documented."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pickle

import pytest

from cpplan import InputError, Settings, Topology
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import StrategyOutcome
from cpplan.pricing.memo import PricingMemo
from cpplan.pricing.problem import Problem
from cpplan.spec import profile as profile_module
from cpplan.spec import settings as settings_module

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)


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

"""Solver profiles: one budget whose stage shares add up to at most one, window limits in order, shipped
profiles stating only what differs from the defaults, earlier keys read only from saved states."""

from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

import cpplan
from cpplan.errors import InputError
from cpplan.spec.profile import SolverProfile
from cpplan.spec.shipped import toml_files


def _profile(**sections) -> dict:
    return {"name": "p", "time_budget_s": 1.0, **sections}


def test_stage_shares_above_one_budget_are_refused_naming_them():
    """Shares whose sum is above one are refused with a ``ValueError`` naming every share and the sum;
    at exactly one they are accepted."""
    with pytest.raises(
        ValidationError,
        match=r"add up to 1\.12 \(joint\.share 0\.6 \+ ownership\.share 0\.3 \+ ownership\.reorder_share",
    ):
        SolverProfile.model_validate(_profile(joint={"share": 0.6}, ownership={"share": 0.3}))
    fits = SolverProfile.model_validate(_profile(joint={"share": 0.48}, ownership={"share": 0.3}))
    assert sum(fits.stage_shares().values()) == pytest.approx(1.0)


def test_completing_a_hint_counts_in_the_budget_only_where_the_hint_is_complete():
    """``ownership.complete_share`` adds to the sum with ``hint = "complete"`` only."""
    sections = {"joint": {"share": 0.48}, "ownership": {"share": 0.3, "complete_share": 0.1}}
    assert "ownership.complete_share" not in SolverProfile.model_validate(_profile(**sections)).stage_shares()
    sections["ownership"]["hint"] = "complete"
    with pytest.raises(ValidationError, match=r"ownership\.complete_share 0\.1"):
        SolverProfile.model_validate(_profile(**sections))


def test_a_profile_file_over_budget_names_the_file(tmp_path):
    """From a file the refusal is an ``InputError`` naming the file."""
    path = tmp_path / "big.toml"
    path.write_text('name = "big"\ntime_budget_s = 1.0\n[joint]\nshare = 0.9\n')
    with pytest.raises(InputError, match=r"big\.toml.*shares of the budget add up to 1\.2"):
        cpplan.load_solver(path)


def test_a_window_cap_below_its_floor_is_refused():
    """``lns.max_window_share`` below ``lns.min_window_share`` is refused naming both."""
    with pytest.raises(
        ValidationError, match=r"lns\.max_window_share \(0\.001\) is below lns\.min_window_share"
    ):
        SolverProfile.model_validate(_profile(lns={"min_window_share": 0.005, "max_window_share": 0.001}))


def test_a_profile_file_with_earlier_keys_is_refused_naming_the_key(tmp_path):
    """Earlier keys are read only from saved planner states: a profile file holding one is refused, the
    error naming the file, its line and the key."""
    path = tmp_path / "old.toml"
    path.write_text('name = "old"\ntime_budget_s = 1.0\n[cpsat]\nmax_items = 32\n')
    with pytest.raises(InputError) as error:
        cpplan.load_solver(path)
    assert error.value.field == "cpsat.max_items" and error.value.line == 4 and "old.toml" in str(error.value)


def test_shipped_profiles_state_only_what_differs_from_the_defaults():
    """No shipped profile restates a default: every setting in its file differs from the value the
    profile would have without it."""
    defaults = SolverProfile(name="defaults", time_budget_s=1.0).model_dump()
    for name, path in toml_files("cpplan.profiles").items():
        data = tomllib.loads(path.read_text())
        for key, value in data.items():
            if isinstance(value, dict):
                for field, setting in value.items():
                    default = defaults[key][field]
                    same = (
                        list(setting) == list(default) if isinstance(default, tuple) else setting == default
                    )
                    assert not same, f"{name}.toml restates the default {key}.{field} = {setting!r}"
            elif key in defaults and key not in ("name", "time_budget_s"):
                default = defaults[key]
                same = list(value) == list(default) if isinstance(default, tuple) else value == default
                assert not same, f"{name}.toml restates the default {key} = {value!r}"


def test_an_earlier_state_over_one_budget_reads_with_its_schedule_share_lowered():
    """A profile saved by an earlier planner state whose shares added up to more than one (the offline
    profile of that time: joint 0.6, ownership 0.3, schedule 0.2) still reads from the state, its schedule
    share lowered to what the other stages leave; the other shares stay as saved."""
    from cpplan.spec.profile import migrated_profile

    saved = _profile(joint={"share": 0.6}, ownership={"share": 0.3}, schedule={"share": 0.2})
    with pytest.raises(ValidationError, match="more than one"):
        SolverProfile.model_validate(saved)
    profile = SolverProfile.model_validate(migrated_profile(saved))
    assert (profile.joint.share, profile.ownership.share) == (0.6, 0.3)
    assert profile.schedule.share == pytest.approx(0.1)
    assert profile.ownership.reorder_share == 0.0, "planned as it was: without the second pass"
    assert saved["schedule"]["share"] == 0.2, "the saved data is not changed in place"

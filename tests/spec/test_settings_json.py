"""The settings' one JSON form: every writer emits it, every reader takes it, and files written by
cpplan before it existed (tests/data/v0, made by the code at 484aa45) still read and verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cpplan
from cpplan import InputError, Planner, Settings, Topology, Workload
from cpplan.cli import main
from cpplan.plans.plan_writer import plan_header
from cpplan.spec.settings import JSON_KEYS

ROOT = Path(__file__).resolve().parents[2]
V0 = ROOT / "tests" / "data" / "v0"
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
V0_CORRECTION = {
    "memory_scale": 1.155,
    "time_scale": 1.56965,
    "memory_observations": 2,
    "time_observations": 1,
}
"""What the v0 planner state's observations teach the current card (its own ``Planner.correction``): the
memory scale it had learned when saved; the time scale is its observed seconds over the current time
model's prediction (1.21416 over the time model it was saved under; 1.7336 over the per-layer-barrier model,
before CP ranks were priced at the published CP ceiling of 0.90)."""


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, dynamic over a pool of 4, 8 GiB, 8 layers."""
    return Settings.from_user(
        topology=Topology(cp=2, dp=2, dynamic_cp=True), model=qwen36, memory_bytes="8GiB", num_layers=8
    )


def test_json_round_trip_gives_the_same_settings(settings):
    """``from_json(to_json())`` gives settings equal to the first; the form names every setting under
    its :data:`JSON_KEYS` key, the topology as an object and the resolved layer count."""
    data = settings.to_json()
    assert set(JSON_KEYS.values()) | {"correction"} == set(data)
    sizes = {"tp": 1, "cp": 2, "ep": 1, "etp": 1, "pp": 1, "dp": 2}
    topology = {**sizes, "dynamic_cp": True, "equal_waves": True}
    assert data["topology"] == topology
    assert Settings.from_json(json.loads(json.dumps(data))) == settings
    full_depth = Settings.from_user(model=settings.model, memory_bytes=1)
    assert full_depth.to_json()["layers"] == settings.model.geometry.num_layers


def test_the_plan_header_and_the_planner_state_write_the_same_form(settings, small_grpo, tmp_path):
    """The plan JSON's settings fields and the planner state's header are :meth:`Settings.to_json`,
    key for key; a saved state loads to the same form (the resolved layer count standing for the card's
    own depth)."""
    planner = Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="deterministic")
    result = planner.plan(small_grpo)
    header = plan_header(result.problem, result.plan)
    written = planner.settings.to_json()
    assert {k: header[k] for k in written} == written
    planner.save(tmp_path / "state.jsonl")
    state = json.loads((tmp_path / "state.jsonl").read_text().splitlines()[0])
    assert {k: state[k] for k in written} == written
    assert Planner.load(tmp_path / "state.jsonl").settings.to_json() == written


def test_a_bad_field_is_named_with_its_file_and_line(settings):
    """A missing key or a bad topology in the JSON form is an InputError naming the file, the line and
    the field."""
    data = settings.to_json()
    with pytest.raises(InputError, match=r"state.jsonl:1, field 'memory_bytes'"):
        Settings.from_json({k: v for k, v in data.items() if k != "memory_bytes"}, file="state.jsonl", line=1)
    with pytest.raises(InputError, match=r"state.jsonl:1, field 'topology"):
        Settings.from_json({**data, "topology": {"cp": 0}}, file="state.jsonl", line=1)


def test_a_planner_state_saved_by_the_old_code_loads_with_its_correction():
    """The v0 planner state (topology as text, raw layer count) loads: the same settings, and its
    observations replayed give the correction it had learned, byte for byte."""
    planner = Planner.load(V0 / "planner_state.jsonl")
    assert planner.settings.topology == Topology(cp=2)
    assert planner.settings.num_layers == 8 and planner.settings.memory_bytes == 8 * 2**30
    learned = planner.correction.to_dict()
    assert {k: learned[k] for k in V0_CORRECTION} == V0_CORRECTION
    full = Planner.load(V0 / "planner_state_full_depth.jsonl")
    assert full.settings.topology == Topology(cp=4, dp=2) and full.settings.num_layers is None
    assert full.profile.name == "runtime" and full.correction.is_identity


def test_plans_written_by_the_old_code_still_verify(capsys):
    """``cpplan verify`` on v0 plan files, settings read from the plan: the plain one and the one
    priced with a learned correction (checked against the correction it records) load and pass every
    check but their time claims: the current time model (per-layer barrier, measured GDN cost) prices
    their waves' seconds anew, so the seconds (``cost_s``, ``card_cost_s``, ``time_s``) and the replayed
    ``start_s`` are all that differ; the API agrees."""
    for name in ("plan.json", "plan_learned.json"):
        code = main(["verify", str(V0 / name), str(EXAMPLE)])
        err = capsys.readouterr().err
        assert code == 1, err
        taken = "model qwen3.6-35b-a3b, topology cp=2, memory_bytes 8,589,934,592 (8.00 GiB), layers 8"
        assert f"from the plan: {taken}" in err
        violations = [line for line in err.splitlines() if line.startswith("violation:")]
        time_claims = (" cost_s ", " card_cost_s ", " start_s ", " time_s ")
        assert violations and all(any(c in v for c in time_claims) for v in violations), violations
    data = json.loads((V0 / "plan_learned.json").read_text())
    verdict = cpplan.verify(
        data,
        Workload.from_jsonl(EXAMPLE),
        topology=Topology(cp=2),
        model="qwen3.6-35b-a3b",
        memory_bytes="8GiB",
        num_layers=8,
    )
    assert verdict.violations and all(any(c in v for c in time_claims) for v in verdict.violations)

"""The Planner a trainer keeps for a run, and PlanResult.to_dict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cpplan
from cpplan.plans.plan_writer import strip_timing

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "grpo.jsonl"


def test_planner_plans_like_the_one_shot_call(small_grpo):
    """Two steps of one deterministic Planner give the plan cpplan.plan gives, byte for byte."""
    planner = cpplan.Planner(model="qwen3-8b", topology="cp=2", memory_bytes="20GiB", solver="deterministic")
    one_shot = cpplan.plan(
        small_grpo,
        topology=cpplan.Topology(cp=2),
        model="qwen3-8b",
        memory_bytes="20GiB",
        solver="deterministic",
    )
    want = strip_timing(one_shot.to_dict())
    for _ in range(2):
        assert strip_timing(planner.plan(small_grpo).to_dict()) == want


def test_planner_refuses_bad_settings_when_made():
    """A card that cannot price the topology, or a bad profile name, fails when the planner is made."""
    with pytest.raises(cpplan.UnsupportedTopologyError):
        cpplan.Planner(model="qwen3-8b", topology="pp=2", memory_bytes="80GiB")
    with pytest.raises(cpplan.InputError, match="solver"):
        cpplan.Planner(model="qwen3-8b", memory_bytes="80GiB", solver="no-such-profile")


def test_planner_memory_strings_are_exact_and_visible():
    """``Planner(memory_bytes="8 GB")`` plans against 8,000,000,000 bytes (decimal GB, as --memory reads
    it) and says so in ``planner.memory_bytes``; ``"8GiB"`` is 8 * 2**30; ``"8G"`` is refused as ambiguous."""
    kwargs = dict(model="qwen3-8b", topology="cp=2", solver="deterministic")
    assert cpplan.Planner(memory_bytes="8 GB", **kwargs).memory_bytes == 8_000_000_000
    assert cpplan.Planner(memory_bytes="8GiB", **kwargs).memory_bytes == 8 * 2**30
    assert cpplan.Planner(memory_bytes=12345678, **kwargs).memory_bytes == 12345678
    with pytest.raises(cpplan.InputError, match=r"write 8GiB .* or 8GB"):
        cpplan.Planner(memory_bytes="8G", **kwargs)


def test_to_dict_is_what_the_cli_writes(tmp_path):
    """PlanResult.to_dict() is the plan JSON `cpplan plan --output` writes (timing fields aside)."""
    out = tmp_path / "plan.json"
    args = [
        "--model",
        "qwen3.6-35b-a3b",
        "--topology",
        "cp=2",
        "--memory",
        "12GiB",
        "--solver",
        "deterministic",
    ]
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from cpplan.cli import run; run()",
            "plan",
            str(EXAMPLE),
            *args,
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    result = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="12GiB", solver="deterministic"
    ).plan(cpplan.Workload.from_jsonl(EXAMPLE))
    written = json.loads(out.read_text())
    assert strip_timing(written) == strip_timing(json.loads(json.dumps(result.to_dict())))

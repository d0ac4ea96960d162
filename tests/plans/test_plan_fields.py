"""The plan JSON's one field schema: what the writer writes and what the reader reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cpplan
from cpplan.plans import plan_fields, plan_reader
from cpplan.plans.plan_fields import (
    CANDIDATE_FIELDS,
    PLAN_FIELDS,
    RANK_FIELDS,
    REQUEST_FIELDS,
    SOLVER_FIELDS,
    TOPOLOGY_FIELDS,
    WAVE_FIELDS,
    WORKLOAD_FIELDS,
    record,
)
from cpplan.plans.plan_writer import plan_to_dict


@pytest.fixture(scope="module")
def result(small_grpo) -> cpplan.PlanResult:
    """A deterministic plan of the small GRPO workload at CP2 and DP2 (so its waves are placed)."""
    return cpplan.plan(
        small_grpo, topology="cp=2,dp=2", model="qwen3-8b", memory_bytes="20GiB", solver="deterministic"
    )


def test_the_writer_writes_the_schema_in_its_order(result):
    """Every object of a full plan JSON has exactly its schema's fields, in the schema's order (the
    placement fields included: the waves run on a pool of two groups)."""
    data = result.to_dict()
    assert tuple(data) == tuple(f for f in PLAN_FIELDS if f != "pack")
    assert tuple(data["workload"]) == WORKLOAD_FIELDS
    assert tuple(data["topology"]) == TOPOLOGY_FIELDS
    assert tuple(data["solver"]) == SOLVER_FIELDS
    assert all(tuple(c) == CANDIDATE_FIELDS for c in data["candidates"])
    for wave in data["waves"]:
        assert tuple(wave) == WAVE_FIELDS
        assert all(tuple(r) == REQUEST_FIELDS for r in wave["requests"])
        assert all(tuple(r) == RANK_FIELDS for r in wave["ranks"])
    alone = plan_to_dict(result.problem, result.plan)
    assert "workload" not in alone and "solver" not in alone and tuple(alone)[-1] == "waves"


def test_record_refuses_fields_outside_the_schema_or_left_out():
    """:func:`record` keeps the schema's order and refuses an unknown field or a missing one."""
    assert list(record(("a", "b", "c"), {"c": 3, "a": 1}, optional=("b",))) == ["a", "c"]
    with pytest.raises(AssertionError, match="outside the schema"):
        record(("a",), {"a": 1, "z": 2})
    with pytest.raises(AssertionError, match="left out"):
        record(("a", "b"), {"a": 1})


def _read_keys(path: Path) -> set[str]:
    """The string keys a module reads from dictionaries: ``x["key"]``, ``x.get("key")`` and
    ``"key" in x``."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
            keys.update(node.left.value for op in node.ops if isinstance(op, ast.In | ast.NotIn))
    return {key for key in keys if isinstance(key, str)}


def test_the_reader_reads_only_fields_the_schema_names():
    """Every key the plan reader reads is a field of the schema, and it reads the fields that place a
    wave and own its tokens (so a field renamed on one side only fails here)."""
    named = {
        value
        for name, fields in vars(plan_fields).items()
        if name.endswith("_FIELDS") and isinstance(fields, tuple)
        for value in fields
    }
    read = _read_keys(Path(plan_reader.__file__))
    assert read - named == set()
    assert {"waves", "gpus", "start_s", "ranges", "segments", "requests", "wave_sha256"} <= read

"""``cpplan verify``: settings read from the plan, one message for a workload the plan was not made for,
and pack shards, shard files and whole pack folders checked on their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpplan.cli import main
from cpplan.pack import pack
from tests.support import pack_data as tp

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
PLAN_ARGS = ["--model", "qwen3.6-35b-a3b", "--topology", "cp=2", "--memory", "12GiB", "--quiet"]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    """The bundled example planned at CP2 with 12 GiB."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", str(EXAMPLE), *PLAN_ARGS, "--output", str(path)]) == 0
    return path


def _run(args, capsys) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_settings_come_from_the_plan(plan_file, capsys):
    """Without --model, --topology and --memory, verify uses the plan's own and says which."""
    code, err = _run(["verify", plan_file, EXAMPLE], capsys)
    assert code == 0, err
    assert "from the plan: model qwen3.6-35b-a3b, topology cp=2, memory_bytes 12,884,901,888" in err
    num_waves = len(json.loads(Path(plan_file).read_text())["waves"])
    assert f"valid: {num_waves} wave(s)" in err


def _variant(tmp_path: Path, change) -> Path:
    lines = EXAMPLE.read_text().splitlines()
    path = tmp_path / "variant.jsonl"
    path.write_text("\n".join(change(lines)) + "\n")
    return path


def _bump_token(lines: list[str]) -> list[str]:
    first = json.loads(lines[0])
    first["requests"][1]["tokens"][-1] += 1
    return [json.dumps(first), *lines[1:]]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda lines: lines[:-1], "holds request 0 of item 'p5', which"),
        (
            lambda lines: [*lines, '{"id": "extra", "tokens": [1, 2, 3]}'],
            "(first: request 0 of item 'extra')",
        ),
        (_bump_token, "have other token ids or flags"),
    ],
    ids=["item missing", "item added", "token changed"],
)
def test_another_workload_is_one_message(plan_file, tmp_path, capsys, change, needle):
    """A workload with an item missing, one more item, or one token changed is refused (exit 2) with one
    line saying the plan was made for another workload, instead of a violation per request."""
    code, err = _run(["verify", plan_file, _variant(tmp_path, change)], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("cpplan: error")]
    assert len(lines) == 1 and "this plan was made for another workload" in lines[0] and needle in lines[0]
    assert "violation" not in err


def test_plans_without_digests_still_verify(plan_file, tmp_path, capsys):
    """A plan JSON written before the workload digests existed is still checked (by ids alone)."""
    data = json.loads(plan_file.read_text())
    del data["workload"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert _run(["verify", old, EXAMPLE], capsys)[0] == 0


@pytest.fixture(scope="module")
def jsonl_pack(tmp_path_factory) -> tuple[Path, Path]:
    """A JSONL dataset with bad lines, packed in windows of 16 items."""
    tmp = tmp_path_factory.mktemp("pack")
    data, _ = tp.write_dataset(tmp)
    out = tmp / "out"
    pack(data, output=out, solver=tp.profile_path(tmp), window=16, **tp.SETTINGS)
    return data, out


def test_shard_file_line_and_folder_verify(jsonl_pack, tmp_path, capsys):
    """A shard file, one of its lines saved alone, the pack folder and its manifest.json all verify
    against the dataset (bad lines and all), with the settings the shards carry."""
    data, out = jsonl_pack
    shard = out / "shards" / "window-000000.jsonl"
    line = tmp_path / "line.json"
    line.write_text(shard.read_text().splitlines()[-1])
    for plan in (shard, line):
        code, err = _run(["verify", plan, data], capsys)
        assert code == 0 and "valid:" in err, err
    for target in (out, out / "manifest.json"):
        code, err = _run(["verify", target], capsys)
        assert code == 0 and "valid: 2 window(s)" in err, err


def test_pack_folder_with_a_changed_dataset_is_refused(jsonl_pack, tmp_path, capsys):
    """Verifying a pack against a dataset whose bytes changed is bad input (exit 2)."""
    data, out = jsonl_pack
    changed = tmp_path / "changed.jsonl"
    changed.write_text(data.read_text().replace('"p1"', '"q1"'))
    code, err = _run(["verify", out, changed], capsys)
    assert code == 2 and "changed since it was packed" in err


def test_broken_shard_reports_violations_per_window(jsonl_pack, tmp_path, capsys):
    """A shard whose budget is lowered below its peaks fails with violations named by shard (exit 1)."""
    data, out = jsonl_pack
    shard = out / "shards" / "window-000001.jsonl"
    code, err = _run(["verify", shard, data, "--memory", "3GiB"], capsys)
    assert code == 1 and "exceeds the budget" in err


def test_sharegpt_shard_verifies_against_the_conversations(tmp_path, capsys):
    """A ShareGPT pack's shard verifies against the JSON array: the conversations are tokenized again as
    its lines say."""
    data = tp.write_sharegpt(tmp_path / "c.json", num_conversations=10)
    out = tmp_path / "out"
    settings = {**tp.SETTINGS, "memory_bytes": tp.sharegpt_budget(data)}
    pack(data, output=out, solver=tp.profile_path(tmp_path), window=5, tokenizer="bytes", **settings)
    code, err = _run(["verify", out / "shards" / "window-000001.jsonl", data], capsys)
    assert code == 0, err
    assert _run(["verify", out], capsys)[0] == 0


def test_workload_is_required_for_a_plan_file(plan_file, capsys):
    """A plan file without WORKLOAD is bad input naming the missing argument."""
    code, err = _run(["verify", plan_file], capsys)
    assert code == 2 and "WORKLOAD" in err


def _edited(plan_file: Path, tmp_path: Path, edit) -> Path:
    """A copy of the plan file after ``edit(data)``."""
    data = json.loads(plan_file.read_text())
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return path


def _violations(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("violation:")]


def _zero_breakdown(data):
    breakdown = data["waves"][0]["ranks"][0]["breakdown"]
    breakdown.update(dict.fromkeys(breakdown, 0))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.update(peak_bytes=1000), "plan peak_bytes 1000 but"),
        (lambda d: d.update(packed_tokens=1), "plan packed_tokens 1 but"),
        (lambda d: d.update(logical_tokens=5), "plan logical_tokens 5 but"),
        (lambda d: d["waves"][0].update(layout="none"), "wave 0: layout 'none' but segment"),
        (lambda d: d["waves"][0].update(split=True), "wave 0: split true but"),
        (_zero_breakdown, "wave 0 rank 0: breakdown 'static' is 0 but"),
        (lambda d: d["waves"][0]["ranks"][0].pop("breakdown"), "wave 0 rank 0: field 'breakdown' is missing"),
        (lambda d: d["solver"].update(bound_s=d["cost_s"] * 2), "plan solver.bound_s "),
    ],
    ids=["peak", "packed", "logical", "layout", "split", "breakdown-zeroed", "breakdown-deleted", "bound"],
)
def test_a_hand_edited_number_is_a_violation(plan_file, tmp_path, capsys, edit, needle):
    """A copy of a valid CP2 plan with one stated figure made false (the plan's peak, packed or logical
    tokens, a wave's layout or split flag, a rank's breakdown zeroed or deleted, a solver bound above
    the plan's cost) exits 1 naming the field."""
    code, err = _run(["verify", _edited(plan_file, tmp_path, edit), EXAMPLE], capsys)
    assert code == 1, err
    assert any(needle in v for v in _violations(err)), err


@pytest.fixture(scope="module")
def dp2_plan_file(tmp_path_factory) -> Path:
    """The bundled example planned at dp=2, cp=2 with 12 GiB."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    args = [*PLAN_ARGS[:2], "--topology", "dp=2,cp=2", *PLAN_ARGS[4:]]
    assert main(["plan", str(EXAMPLE), *args, "--output", str(path)]) == 0
    return path


@pytest.mark.parametrize("dp_rank", [7, 1])
def test_a_waves_dp_rank_must_be_its_gpus_replica(dp2_plan_file, tmp_path, capsys, dp_rank):
    """In a dp=2 plan, wave 0 (on GPUs 0 and 1) stating ``dp_rank`` 7, or 1, exits 1 naming the field."""
    assert json.loads(dp2_plan_file.read_text())["waves"][0]["gpus"] == [0, 1]
    edited = _edited(dp2_plan_file, tmp_path, lambda d: d["waves"][0].update(dp_rank=dp_rank))
    code, err = _run(["verify", edited, EXAMPLE], capsys)
    assert code == 1
    assert _violations(err) == [
        f"violation: wave 0: dp_rank {dp_rank} but its gpus [0, 1] lie on replica 0 (dp=2)"
    ]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (
            ["--topology", "cp=4"],
            "the plan was made for topology tp=1,cp=2,ep=1,etp=1,pp=1,dp=1, not tp=1,cp=4",
        ),
        (["--topology", "dp=2,cp=2"], "the plan was made for topology tp=1,cp=2,ep=1,etp=1,pp=1,dp=1, not "),
        (["--layers", "8"], "the plan was made for layers 40, not 8 (--layers)"),
        (["--phase", "warm"], "the plan was made for phase 'cold', not 'warm' (--phase)"),
        (
            ["--model", "qwen3-8b", "--layers", "8"],
            "the plan was made for model 'qwen3.6-35b-a3b', not 'qwen3-8b'",
        ),
    ],
    ids=["cp4", "dp2", "layers", "phase", "model"],
)
def test_other_settings_are_said_once(plan_file, capsys, options, needle):
    """Checked under a topology, depth, phase or model other than the plan's, verify says so once,
    naming both, and checks nothing else (no follow-on "in no wave" or price lines); exit 1."""
    code, err = _run(["verify", plan_file, EXAMPLE, *options], capsys)
    assert code == 1
    assert _violations(err) == [f"violation: {needle}"] or (
        len(_violations(err)) == 1 and needle in _violations(err)[0]
    ), err
    assert "in no wave" not in err


def test_a_plan_whose_model_was_edited_says_so_once(plan_file, tmp_path, capsys):
    """A plan whose ``model`` was edited to a card with fewer layers than the plan states is one
    violation naming the model and the layers, not a --layers error the user never typed."""
    edited = _edited(plan_file, tmp_path, lambda d: d.update(model="qwen3-8b"))
    code, err = _run(["verify", edited, EXAMPLE], capsys)
    assert code == 1
    (violation,) = _violations(err)
    assert "the plan states model 'qwen3-8b' with layers 40, which that model cannot run" in violation


def test_another_budget_is_said_and_checked(plan_file, capsys):
    """A budget other than the plan's is said once on standard error and the plan is checked at it:
    every rank over it is a violation of its own; a larger budget passes."""
    code, err = _run(["verify", plan_file, EXAMPLE, "--memory", "6GiB"], capsys)
    assert code == 1
    assert "the plan was made for memory_bytes 12,884,901,888; checking it at 6,442,450,944 (--memory)" in err
    assert _violations(err) and all(
        "exceeds the budget of 6,442,450,944 bytes" in v for v in _violations(err)
    )
    assert _run(["verify", plan_file, EXAMPLE, "--memory", "13GiB"], capsys)[0] == 0

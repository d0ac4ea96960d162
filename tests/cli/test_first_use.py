"""What a first-time user of the command line trips on: predictions labelled as such, token
ids beyond the vocabulary, a plan verified on another model, one rule for a budget below the static
floor, a ceiling on rejected items, and messages in the user's own terms."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cpplan.cli import main
from cpplan.errors import InputError
from cpplan.spec.units import memory_warning, parse_memory
from tests.support import pack_data as tp

ROOT = Path(__file__).resolve().parents[2]


def run(args, capsys) -> tuple[int, str, str]:
    """``cpplan ARGS``: its exit code, standard output and standard error."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def small_workload(tmp_path: Path, num_prompts: int = 4) -> Path:
    """A few small GRPO items as a workload file."""
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(tp.workload_lines(num_prompts)) + "\n")
    return path


def plan_args(tmp_path: Path, workload: Path) -> list:
    """`cpplan plan` of ``workload`` under the pack tests' settings and their greedy-only profile."""
    return ["plan", workload, *tp.CLI_SETTINGS, "--solver", tp.profile_path(tmp_path)]


def test_the_plan_tables_call_peaks_and_seconds_predictions(tmp_path, capsys, monkeypatch):
    """The wave table's peak and seconds columns and the candidates' seconds say they are predictions
    (the card's), and the candidates' seconds say they are not the solve time (read on a console wide
    enough that no header wraps)."""
    monkeypatch.setenv("COLUMNS", "400")
    code, _, err = run([*plan_args(tmp_path, small_workload(tmp_path)), "-o", tmp_path / "p.json"], capsys)
    assert code == 0
    text = " ".join(err.split())
    assert "the card's predictions" in text and "not the solve time" in text
    header = next(line for line in err.splitlines() if "busiest rank" in line)
    cells = re.split(r"\s{2,}", header.strip())
    assert "predicted peak" in cells and "predicted seconds" in cells
    assert "peak" not in cells and "seconds" not in cells


def test_a_token_id_beyond_the_vocabulary_is_bad_input(tmp_path, capsys):
    """A token id the card's vocabulary does not hold (1,000,000,000 with 248,320 ids) exits 2 naming
    the file, the line, the field and the vocabulary; the last id of the vocabulary is accepted."""
    lines = tp.workload_lines(2)
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join([*lines, json.dumps({"id": "edge", "tokens": [1, 2, 248_319]})]) + "\n")
    assert run([*plan_args(tmp_path, good), "--quiet"], capsys)[0] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines, json.dumps({"id": "far", "tokens": [1, 2, 1_000_000_000]})]) + "\n")
    code, _, err = run([*plan_args(tmp_path, bad), "--quiet"], capsys)
    assert code == 2
    assert f"{bad}:3, field 'items[2].requests[0].tokens'" in err
    assert "token 2 is 1,000,000,000, beyond the model's vocabulary of 248,320 ids" in err


def test_the_python_api_refuses_a_token_beyond_the_vocabulary():
    """`cpplan.plan` refuses the token too (an InputError naming the request's field), before planning."""
    import cpplan

    workload = cpplan.Workload(items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=[5, 151_936]),)),))
    with pytest.raises(InputError, match=r"field 'items\[0\]\.requests\[0\]\.tokens'.*vocabulary of 151,936"):
        cpplan.plan(workload, topology=cpplan.Topology(), model="qwen3-8b", memory_bytes="8GiB")


def test_pack_rejects_an_item_beyond_the_vocabulary_with_its_line(tmp_path, capsys):
    """`cpplan pack` rejects the item holding such a token (its line and reason in rejects.jsonl) and
    plans the rest."""
    lines = tp.workload_lines(3)
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join([*lines, json.dumps({"id": "far", "tokens": [1, 10**9]})]) + "\n")
    out = tmp_path / "out"
    args = ["pack", data, *tp.CLI_SETTINGS, "--output", out, "--solver", tp.profile_path(tmp_path), "--quiet"]
    assert run(args, capsys)[0] == 0
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == 1 and rejects[0]["id"] == "far" and rejects[0]["line"] == len(lines) + 1
    assert "beyond the model's vocabulary" in json.dumps(rejects[0])


def test_verify_on_another_model_names_both_models(tmp_path, capsys):
    """`cpplan verify PLAN WORKLOAD --model OTHER` without --layers says the plan was made for another
    model and names both (not a --layers error the user never typed); with --layers that is one
    violation naming both (every figure of the plan is its own model's); with the plan's own model it is
    valid."""
    workload = small_workload(tmp_path)
    plan = tmp_path / "p.json"
    assert run([*plan_args(tmp_path, workload), "-o", plan, "--quiet"], capsys)[0] == 0
    code, _, err = run(["verify", plan, workload, "--model", "qwen3-8b"], capsys)
    assert code == 2
    assert "the plan was made for model 'qwen3.6-35b-a3b' (4 layers), not for 'qwen3-8b'" in err
    assert "must be between" not in err
    code, _, err = run(["verify", plan, workload, "--model", "qwen3-8b", "--layers", "4"], capsys)
    assert code == 1 and err.count("violation:") == 1
    assert "the plan was made for model 'qwen3.6-35b-a3b', not 'qwen3-8b' (--model)" in err
    assert run(["verify", plan, workload, "--model", tp.MODEL], capsys)[0] == 0


def test_a_budget_below_the_static_floor_is_bad_input_for_pack_as_for_plan(tmp_path, capsys):
    """`cpplan pack --memory 1MiB` exits 2 with the one static-floor message `cpplan plan` gives for
    that budget, instead of exiting 3 and blaming every item."""
    workload = small_workload(tmp_path)
    settings = ["--model", tp.MODEL, "--topology", "cp=2", "--memory", "1MiB", "--layers", "4"]
    code, _, plan_err = run(["plan", workload, *settings], capsys)
    assert code == 2 and "below the static floor" in plan_err
    out = tmp_path / "out"
    code, _, pack_err = run(["pack", workload, *settings, "--output", out, "--quiet"], capsys)
    assert code == 2
    assert pack_err.strip().splitlines() == plan_err.strip().splitlines()
    assert not (out / "rejects.jsonl").exists()


def test_max_rejected_fails_a_pack_above_it(tmp_path, capsys):
    """`--max-rejected` fails the pack (exit 3, naming the count, the fraction and the threshold) when
    more items were rejected than it allows, as a count or a percentage; at or under it the pack exits
    0; a malformed value is bad input (exit 2) before any planning."""
    data, kinds = tp.write_dataset(tmp_path)
    num_in = len(kinds) + len(tp.workload_lines())
    base = ["pack", data, *tp.CLI_SETTINGS, "--solver", tp.profile_path(tmp_path), "--quiet"]
    code, _, err = run([*base, "--output", tmp_path / "a", "--max-rejected", "3"], capsys)
    assert code == 3
    assert f"too many rejected: {len(kinds)} of {num_in} items ({len(kinds) / num_in:.1%}) were" in err
    assert "more than --max-rejected 3 allows" in err and "Commonest reasons" in err
    assert run([*base, "--output", tmp_path / "b", "--max-rejected", str(len(kinds))], capsys)[0] == 0
    code, _, err = run([*base, "--output", tmp_path / "c", "--max-rejected", "10%"], capsys)
    assert code == 3 and "--max-rejected 10% allows" in err
    assert run([*base, "--output", tmp_path / "d", "--max-rejected", "15%"], capsys)[0] == 0
    for text in ("many", "-1", "120%"):
        code, _, err = run([*base, "--output", tmp_path / "e", "--max-rejected", text], capsys)
        assert code == 2 and "field 'max-rejected'" in err, text
    assert not (tmp_path / "e").exists()


def test_report_on_a_missing_folder_says_it_does_not_exist(tmp_path, capsys):
    """`cpplan report` on a folder that does not exist says so (not "no manifest.json")."""
    code, _, err = run(["report", tmp_path / "nowhere"], capsys)
    assert code == 2 and "does not exist" in err and "no manifest.json" not in err


def test_a_sharegpt_record_without_conversations_says_the_field_is_missing():
    """A ShareGPT record lacking `conversations` is refused as a missing field, not as "got NoneType"."""
    from cpplan.pack.conversations import conversation_item, load_tokenizer

    with pytest.raises(InputError) as caught:
        conversation_item({"id": "c0", "messages": []}, load_tokenizer("bytes"), "chats.json", 4)
    assert "chats.json:4, field 'conversations': missing" in str(caught.value)
    assert "NoneType" not in str(caught.value)


def test_gpu_memory_answers_in_the_users_unit(tmp_path, capsys):
    """`--gpu-memory 80GB --resident 90GB` is refused in GB, the unit the user wrote (GiB for GiB)."""
    workload = small_workload(tmp_path)
    base = ["plan", workload, "--model", tp.MODEL, "--quiet"]
    code, _, err = run([*base, "--gpu-memory", "80GB", "--resident", "90GB"], capsys)
    assert code == 2 and "90.00 GB resident leaves nothing of the 80.00 GB GPU" in err
    code, _, err = run([*base, "--gpu-memory", "80GiB", "--resident", "90GiB"], capsys)
    assert code == 2 and "90.00 GiB resident leaves nothing of the 80.00 GiB GPU" in err


def test_the_docs_command_lines_use_budgets_the_cli_does_not_warn_about():
    """Every `--memory SIZE` of a `cpplan plan`, `verify` or `pack` command line in the README and the
    docs is a wave budget those commands take without a warning (the docs model what a
    user should type)."""
    found = []
    command = re.compile(r"cpplan (?:plan|verify|pack) [^\n`|]*?--memory ([0-9][0-9.]*[A-Za-z]+)\b")
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        if doc.name == "bad_input.md":  # the bad-input table shows refused and warned inputs on purpose
            continue
        for size in command.findall(doc.read_text(encoding="utf-8")):
            found.append(size)
            assert memory_warning(parse_memory(size)) is None, f"{doc.name}: --memory {size}"
    assert "36GiB" in found and "8GiB" in found

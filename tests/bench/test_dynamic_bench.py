"""The dynamic-CP benchmark: its per-instance summary and, on the quick suite, its claims."""

from __future__ import annotations

import pytest

from cpplan.bench.dynamic import DynamicRow, format_summary, run_dynamic_bench, summary
from cpplan.bench.suites import agent_chat_mix, mixed_suite


def _row(planner: str, status: str, cost: float | None, sizes=(4,)) -> DynamicRow:
    return DynamicRow(
        case="c",
        family="mixed",
        memory="40GiB",
        planner=planner,
        status=status,
        cost_s=cost,
        num_waves=3,
        group_sizes=sizes,
        plan_s=0.1,
    )


def test_summary_compares_against_the_best_valid_fixed_cp():
    """The best fixed CP is the cheapest valid fixed plan (an OOM one does not count), the gain is its
    cost over dynamic's, and each property is stated."""
    rows = [
        _row("fixed_cp1", "refused", None),
        _row("fixed_cp2", "oom", 5.0),
        _row("fixed_cp4", "valid", 12.0),
        _row("fixed_cp8", "valid", 10.0, (8,)),
        _row("cpplan_dynamic", "valid", 8.0, (1, 8)),
        _row("megatron_dynamic_cp", "valid", 9.0, (1, 2)),
    ]
    (line,) = summary(rows)
    assert line["best_fixed"] == "fixed_cp8" and line["gain"] == pytest.approx(1.25)
    assert line["never_above_best_fixed"] and line["megatron_not_cheaper"]
    assert line["cpplan_oom_plans"] == 1  # the fixed CP2 plan of cpplan's portfolio would be reported
    assert "1.250x" in format_summary([line])


def test_mixed_suite_is_deterministic_and_mixed():
    """The agent/chat mix holds a few trajectories of 100K+ tokens among many short chats, the same on
    every build; the suite names its three workloads."""
    first, second = (
        agent_chat_mix(num_trajectories=4, num_chats=32),
        agent_chat_mix(num_trajectories=4, num_chats=32),
    )
    assert [i.id for i in first.items] == [i.id for i in second.items]
    long = [i for i in first.items if i.num_tokens >= 100_000]
    assert len(long) == 4 and all(i.num_tokens < 20_000 for i in first.items if i not in long)
    assert {c.name for c in mixed_suite(quick=True)} >= {"agent_chat_mix", "long_tail_192k"}


@pytest.mark.slow
def test_quick_dynamic_bench_claims_hold():
    """On the quick suite at 40 GiB: dynamic is never above the best fixed CP, no cpplan plan runs out
    of memory, and no valid Megatron dynamic-CP plan is cheaper than cpplan's."""
    result = run_dynamic_bench(quick=True, memories=("40GiB",))
    for line in result["summary"]:
        assert line["never_above_best_fixed"] and line["cpplan_oom_plans"] == 0
        assert line["megatron_not_cheaper"]

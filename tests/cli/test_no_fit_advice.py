"""What `cpplan plan` advises when nothing fits: a `--memory` and a `--topology` that each plan the
whole workload under the same profile, checked before they are printed, found by a bounded search."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cpplan.cli import main, no_fit
from cpplan.errors import NoFitError
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import load_solver
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
MODEL = ["--model", "qwen3.6-35b-a3b"]


def run(args, capsys) -> tuple[int, str, str]:
    """``cpplan ARGS``: its exit code, standard output and standard error."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def advised(err: str) -> tuple[str | None, str | None]:
    """The ``--memory`` and ``--topology`` values an exit-3 message advises (``None`` where it has none)."""
    memory = re.search(r"--memory (\d+MiB) \([^)]*\) plans the whole workload", err)
    topology = re.search(r"--topology (\S+) plans it within", err)
    return memory and memory.group(1), topology and topology.group(1)


def plan_exit(topology: str, memory: str, capsys, *extra) -> int:
    """The exit code of planning the README example at ``topology`` and ``memory``."""
    args = ["plan", EXAMPLE, *MODEL, "--topology", topology, "--memory", memory, "--quiet", *extra]
    return run(args, capsys)[0]


@pytest.mark.parametrize(
    ("topology", "memory", "cp"),
    [("cp=2", "6634MiB", "cp=8"), ("cp=2,dp=2", "6634MiB", "cp=8,dp=2")],
)
def test_the_advice_plans_the_whole_workload(capsys, topology, memory, cp):
    """At 6 GiB the README example exits 3 with a budget and a topology to use instead; planning with
    each exits 0 (the first refused request's own need, 6,786,557,349 bytes, would not: another request
    needs more; cp=4 would not either), and one MiB less, or the CP size below, exits 3: the advice is
    checked by planning and is the least found."""
    code, _, err = run(["plan", EXAMPLE, *MODEL, "--topology", topology, "--memory", "6GiB"], capsys)
    assert code == 3 and "alone needs 6,786,557,349 bytes" in err
    assert advised(err) == (memory, cp)
    assert plan_exit(topology, memory, capsys) == 0
    assert plan_exit(cp, "6GiB", capsys) == 0
    assert plan_exit(topology, f"{int(memory[:-3]) - 1}MiB", capsys) == 3
    assert plan_exit(cp.replace("cp=8", "cp=4"), "6GiB", capsys) == 3


@pytest.mark.slow
def test_the_advice_plans_under_dynamic_cp(capsys):
    """Under --dynamic-cp (a pool of dp x cp GPUs) the advice is checked on the pool: both advised
    values plan."""
    code, _, err = run(
        ["plan", EXAMPLE, *MODEL, "--topology", "dp=2,cp=2,dynamic_cp=1", "--memory", "6GiB"], capsys
    )
    memory, topology = advised(err)
    assert code == 3 and memory and topology and "dynamic_cp=1" in topology
    assert plan_exit("dp=2,cp=2,dynamic_cp=1", memory, capsys) == 0
    assert plan_exit(topology, "6GiB", capsys) == 0


def test_the_advice_is_checked_under_the_users_profile(tmp_path, capsys):
    """Under a profile of the user's (here one that runs full sharing alone, no greedy) the advice is
    checked under that profile and plans under it; the message names the profile."""
    path = tmp_path / "shared.toml"
    path.write_text('name = "shared"\ntime_budget_s = 1.0\nstrategies = ["full_sharing"]\n')
    solver = ["--solver", path]
    code, _, err = run(["plan", EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "6GiB", *solver], capsys)
    memory, topology = advised(err)
    assert code == 3 and "under profile shared" in err
    assert plan_exit("cp=2", memory, capsys, *solver) == 0
    assert plan_exit(topology, "6GiB", capsys, *solver) == 0


def test_a_check_runs_the_profiles_greedy_candidate_alone():
    """A profile that runs greedy is checked by its greedy candidate alone, with the same layouts and
    budget (a valid greedy plan is a plan of every run of the profile); one that does not run greedy is
    checked whole."""
    profile = load_solver("deterministic")
    checking = no_fit.checking_profile(profile)
    assert checking.strategies == ("greedy",)
    assert checking.model_copy(update={"strategies": profile.strategies}) == profile
    no_greedy = profile.model_copy(update={"strategies": ("full_sharing", "cpsat")})
    assert no_fit.checking_profile(no_greedy) is no_greedy


def test_the_search_is_bounded_and_says_when_it_found_nothing(monkeypatch):
    """The budget search makes at most MAX_MEMORY_TRIES planning calls and the CP search one per size up
    to MAX_CP_FACTOR times the topology's; with too few tries to reach a fitting budget, the message says
    no budget up to the last one tried plans, and advises no number."""
    monkeypatch.setattr(no_fit, "MAX_MEMORY_TRIES", 2)
    settings = Settings.from_user(topology="cp=2", model="qwen3.6-35b-a3b", memory_bytes="6GiB")
    problem = Problem.build(Workload.from_jsonl(EXAMPLE), settings)
    profile = load_solver("deterministic")
    refusal = NoFitError("p0", item="p0", needed_bytes=6_786_557_349)
    advice = no_fit.advise(refusal, problem, profile)
    assert advice.memory_bytes is None and advice.num_plans == 2 + 2
    assert advice.topology is not None and advice.topology.cp == 8
    text = no_fit.advice_text(advice, problem, profile)
    assert "no --memory up to 6.32 GiB plans the whole workload" in text and "MiB (" not in text

"""``--dynamic-cp`` on the command line: plan over the pool, write the schedule, verify it."""

from __future__ import annotations

import json

import numpy as np

from cpplan.bench.synthetic import to_jsonl
from cpplan.cli import main
from cpplan.spec.workload import Item, Request, Workload


def test_plan_and_verify_a_dynamic_cp_plan(tmp_path, capsys):
    """``cpplan plan --topology dp=2,cp=2 --dynamic-cp`` writes waves with ``cp``, ``gpus`` and
    ``start_s`` and a makespan ``cost_s``; ``cpplan verify --dynamic-cp`` accepts it; verifying the
    same file as a fixed CP2 plan is one violation naming both topologies."""
    rng = np.random.default_rng(4)
    lengths = [6000, *rng.integers(200, 800, 10).tolist()]
    workload = Workload(
        items=tuple(
            Item(id=f"i{k}", requests=(Request(tokens=rng.integers(0, 5000, n)),))
            for k, n in enumerate(lengths)
        )
    )
    path, out = tmp_path / "w.jsonl", tmp_path / "plan.json"
    path.write_text(to_jsonl(workload))
    common = ["--model", "qwen3-8b", "--memory", "2.2GiB", "--layers", "2", "--topology", "dp=2,cp=2"]
    assert (
        main(
            [
                "plan",
                str(path),
                *common,
                "--dynamic-cp",
                "--solver",
                "deterministic",
                "--quiet",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["topology"]["dynamic_cp"] is True
    starts = [w["start_s"] for w in data["waves"]]
    assert all({"cp", "gpus", "start_s"} <= set(w) for w in data["waves"]) and starts[0] == 0.0
    assert data["cost_s"] == max(w["start_s"] + w["cost_s"] for w in data["waves"])
    assert main(["verify", str(out), str(path), *common, "--dynamic-cp"]) == 0
    capsys.readouterr()
    assert main(["verify", str(out), str(path), *common]) == 1
    err = capsys.readouterr().err
    assert "the plan was made for topology tp=1,cp=2,ep=1,etp=1,pp=1,dp=2,dynamic_cp=1, not " in err
    assert err.count("violation:") == 1


def test_equal_waves_flag_on_the_command_line(tmp_path):
    """At ``dp=2,cp=2`` a plan states ``equal_waves`` and its ``padding`` by default and verifies;
    ``--no-equal-waves`` writes neither (the unequal plan) and verifies too; the same opt-out plan
    verified with ``--equal-waves`` is refused when its replicas run unequal numbers of waves."""
    rng = np.random.default_rng(5)
    lengths = [5000, 5000, 5000]  # one a wave: three waves on two replicas
    workload = Workload(
        items=tuple(
            Item(id=f"i{k}", requests=(Request(tokens=rng.integers(0, 5000, n)),))
            for k, n in enumerate(lengths)
        )
    )
    path = tmp_path / "w.jsonl"
    path.write_text(to_jsonl(workload))
    common = ["--model", "qwen3-8b", "--memory", "2.4GiB", "--layers", "2", "--topology", "dp=2,cp=2"]
    plans = {}
    for flag in ("", "--no-equal-waves"):
        out = tmp_path / f"plan{flag}.json"
        args = ["plan", str(path), *common, *([flag] if flag else []), "--solver", "deterministic", "--quiet"]
        assert main([*args, "--output", str(out)]) == 0
        assert main(["verify", str(out), str(path)]) == 0
        plans[flag] = json.loads(out.read_text())
    equal, unequal = plans[""], plans["--no-equal-waves"]
    assert equal["topology"]["equal_waves"] is True and len(equal["padding"]["waves"]) == 4
    assert "equal_waves" not in unequal["topology"] and "padding" not in unequal
    counts = [sum(g in w["gpus"] for w in unequal["waves"]) for g in range(4)]
    refused = main(
        ["verify", str(tmp_path / "plan--no-equal-waves.json"), str(path), *common, "--equal-waves"]
    )
    assert len(set(counts)) > 1 and refused == 1

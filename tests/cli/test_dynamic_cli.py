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
    same file as a fixed CP2 plan refuses every wave of another group size."""
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
    other = {w["cp"] for w in data["waves"]} - {2}
    if other:
        assert main(["verify", str(out), str(path), *common]) == 1
        assert "is not a group size of topology" in capsys.readouterr().err

"""``benchmarks/bench_trl_step.py`` times the two trainers fairly: their steps take turns, one at a time."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    """The benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_trl_step", ROOT / "benchmarks" / "bench_trl_step.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_trl_step", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_turns_interleave_stock_and_cpplan():
    """A warm-up step each, then timed steps in the order stock, cpplan, cpplan, stock, ... (each trainer
    as often first as second), then a profiled step each."""
    order = _bench().turns(4)
    assert order[:2] == ["stock", "cpplan"] and order[-2:] == ["stock", "cpplan"]
    assert order[2:-2] == ["stock", "cpplan", "cpplan", "stock"] * 2


def test_baton_runs_one_step_at_a_time_in_order():
    """Two threads each stepping under the baton run their steps strictly in the baton's order, never
    two at once."""
    bench = _bench()
    order = bench.turns(3)
    baton, ran, running = bench.Baton(order), [], []

    def steps(name: str) -> None:
        for _ in range(order.count(name)):
            baton.wait(name)
            running.append(name)
            assert len(running) == 1
            ran.append(name)
            running.pop()
            baton.done()

    threads = [threading.Thread(target=steps, args=(name,)) for name in bench.NAMES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert ran == order

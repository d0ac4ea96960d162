"""``benchmarks/bench_seed_peer.py``: it skips with the commit and install line when ART's planner is
absent, and its cpplan half (mapping ART's decisions onto cpplan's tree, Kendall's tau) is right on a
tiny tree. ART's own half runs in the benchmark, not here (CI has no ART trainer_rank)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from cpplan.api import build_problem
from cpplan.bench import seed_peer as sp
from cpplan.spec.workload import Item, Request, Workload

ROOT = Path(__file__).resolve().parents[2]
SYSTEM, PROMPT, COMPLETION = 300, 200, 100


def _bench():
    """The benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "bench_seed_peer", ROOT / "benchmarks" / "bench_seed_peer.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_skips_with_commit_and_install_line_when_art_is_absent(tmp_path, capsys):
    """Without ART's trainer_rank modules the benchmark exits 0 with a message naming the missing file,
    the ART commit and the install line, and writes no results."""
    bench = _bench()
    output = tmp_path / "out.json"
    assert bench.main(["--art-src", str(tmp_path), "--output", str(output)]) == 0
    message = capsys.readouterr().out
    assert "skipped" in message
    assert "art/trainer_rank/_prefix_tree_planner.py" in message
    assert bench.ART_COMMIT in message
    assert f"git+https://github.com/OpenPipe/ART@{bench.ART_COMMIT}" in message
    assert not output.exists()


def test_cpplan_package_does_not_import_art():
    """Importing the cpplan half leaves ART unimported: the peer stays outside cpplan's import path."""
    code = "import sys, cpplan, cpplan.bench.seed_peer; print('art' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_kendall_tau_identical_reversed_and_ties():
    """Tau is 1 for identical rankings, -1 for reversed ones, tie-corrected (tau-b) in between, and
    undefined with one item or a ranking that ties everything."""
    assert sp.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert sp.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert sp.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert sp.kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / np.sqrt(6))
    assert sp.kendall_tau([5], [1]) is None
    assert sp.kendall_tau([1, 1, 1], [1, 2, 3]) is None
    assert sp.discordant_pairs([1, 2, 3], [1, 3, 2]) == [(1, 2)]
    assert sp.dense_ranks([(2, 0), (1, 5), (2, 0), (1, 4)]) == [2, 1, 2, 0]


def _tiny_problem():
    """Three wave requests: A and B share system + prompt 1, C shares the system prompt only. A fourth
    item, D, shares half of prompt 1 with A and B, so the step's tree splits prompt 1 in two nodes where
    the wave's tree (A, B, C) has one span."""
    rng = np.random.default_rng(0)
    system, prompt1, prompt2 = (rng.integers(10, 1000, n) for n in (SYSTEM, PROMPT, PROMPT))
    tail = lambda: rng.integers(10, 1000, COMPLETION)  # noqa: E731
    requests = {
        "a": np.concatenate([system, prompt1, tail()]),
        "b": np.concatenate([system, prompt1, tail()]),
        "c": np.concatenate([system, prompt2, tail()]),
        "d": np.concatenate([system, prompt1[: PROMPT // 2], tail()]),
    }
    workload = Workload(items=tuple(Item(id=k, requests=(Request(tokens=v),)) for k, v in requests.items()))
    return build_problem(workload, model="qwen3-8b", memory_bytes="40GiB")


def _canonical():
    """The wave tree's canonical segments as ART builds them for (A, B, C): the decisions are the
    system span (all three) and prompt 1 (A and B)."""
    seg = types.SimpleNamespace
    return [
        seg(index=0, sequence_indices=(0, 1, 2), end=SYSTEM),
        seg(index=1, sequence_indices=(0, 1), end=SYSTEM + PROMPT),
        seg(index=2, sequence_indices=(0,), end=SYSTEM + PROMPT + COMPLETION),
        seg(index=3, sequence_indices=(1,), end=SYSTEM + PROMPT + COMPLETION),
        seg(index=4, sequence_indices=(2,), end=SYSTEM + PROMPT + COMPLETION),
    ]


def test_art_decision_maps_onto_the_node_ending_where_it_ends():
    """Sharing ART's prompt-1 decision alone packs A and B's system and prompt once (one segment, the
    system copied once more for C) even though the step's tree splits prompt 1 in two nodes; the
    layout reads back as that decision set, and sharing both decisions packs every node once."""
    problem, wave = _tiny_problem(), (0, 1, 2)
    requests, sequences = sp.wave_sequences(problem, wave)
    assert [s.size for s in sequences] == [SYSTEM + PROMPT + COMPLETION] * 3
    canonical = _canonical()
    view = sp.layout_view(problem.pack(wave, sp.decisions_mask(problem, requests, canonical, frozenset({1}))))
    assert view.packed_tokens == (SYSTEM + PROMPT) + 2 * COMPLETION + (SYSTEM + PROMPT + COMPLETION)
    assert (0, SYSTEM + PROMPT, (0, 1)) in view.signature
    assert view.maximum_depth == 2
    assert sp.decisions_of(view, canonical) == frozenset({1})
    full = sp.layout_view(
        problem.pack(wave, sp.decisions_mask(problem, requests, canonical, frozenset({0, 1})))
    )
    assert full.packed_tokens == SYSTEM + 2 * PROMPT + 3 * COMPLETION
    assert full.maximum_depth == 3
    assert sp.decisions_of(full, canonical) == frozenset({0, 1})
    assert sp.decisions_of(sp.layout_view(problem.pack(wave, "none")), canonical) == frozenset()


def test_partial_share_is_not_an_art_decision_set():
    """Sharing only the first half of prompt 1 (a node of the step's tree, not of the wave's) is a
    layout ART cannot express: it reads back as no decision set, though its segments still price."""
    problem, wave = _tiny_problem(), (0, 1, 2)
    requests, _ = sp.wave_sequences(problem, wave)
    mask = np.zeros(problem.tree.num_nodes, dtype=bool)
    mask[sp.node_ending_at(problem.tree, int(requests[0]), SYSTEM + PROMPT // 2)] = True
    view = sp.layout_view(problem.pack(wave, mask))
    assert (0, SYSTEM + PROMPT // 2, (0, 1)) in view.signature
    assert sp.decisions_of(view, _canonical()) is None

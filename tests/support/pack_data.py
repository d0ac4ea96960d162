"""Datasets, settings and folder helpers shared by the pack tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cpplan import Topology, load_model
from cpplan.bench.synthetic import grpo, to_jsonl
from cpplan.pack import read_manifest
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Workload, parse_item_line

DATA = Path(__file__).resolve().parents[1] / "data"
SHAREGPT = DATA / "sharegpt_tiny.json"
MODEL = "qwen3.6-35b-a3b"
HUGE = {"id": "huge", "tokens": list(range(60_000))}
PROFILE_TOML = """name = "pack-test"
time_budget_s = 30.0
strategies = ["greedy", "full_sharing"]

[greedy]
layouts = ["full", "none"]
"""


def profile_path(tmp_path: Path) -> Path:
    """A deterministic profile (greedy strategies only) for byte-for-byte comparisons."""
    path = tmp_path / "pack-test.toml"
    path.write_text(PROFILE_TOML)
    return path


def workload_lines(num_prompts: int = 24, seed: int = 3) -> list[str]:
    """GRPO items as JSONL lines (small: several waves at :data:`BUDGET` with 4 layers)."""
    workload = grpo(
        num_prompts=num_prompts,
        group_size=3,
        system_tokens=128,
        prompt_tokens=(100, 600),
        completion_tokens=(40, 200),
        seed=seed,
    )
    return to_jsonl(workload).splitlines()


def memory_bytes() -> int:
    """A per-rank budget (4 layers, CP2) a third of the way from the largest test item's full-sharing
    peak to all of them together: every item fits alone, waves hold several items, and the 60,000-token
    ``huge`` request fits nowhere. Derived from the card, so it follows calibration changes."""
    items = [parse_item_line(line, "x", 1) for line in workload_lines()]
    problem = Problem.build(
        Workload(items=(*items, parse_item_line(json.dumps(HUGE), "x", 1))),
        Settings(topology=Topology(cp=2), model=load_model(MODEL), memory_bytes=2**60, num_layers=4),
    )
    single = max(best_wave(problem, [i], ("full",))[0].peak_bytes for i in range(len(items)))
    whole = best_wave(problem, range(len(items)), ("full",))[0].peak_bytes
    budget = single + (whole - single) // 3
    assert best_wave(problem, [len(items)], ("full", "none"))[1].peak_bytes > budget
    return budget


BUDGET = memory_bytes()
SETTINGS = {"model": MODEL, "topology": Topology(cp=2), "memory_bytes": BUDGET, "num_layers": 4}
CLI_SETTINGS = ["--model", MODEL, "--topology", "cp=2", "--memory", str(BUDGET), "--layers", "4"]


def write_dataset(tmp_path: Path, num_prompts: int = 24) -> tuple[Path, dict[int, str]]:
    """A JSONL dataset with good items and, at known lines, bad ones; returns it and {line: kind}."""
    lines = workload_lines(num_prompts)
    bad = {
        3: ("{not json", "input"),
        8: (json.dumps({"id": "neg", "tokens": [1, -5, 3]}), "input"),
        13: (json.dumps(HUGE), "no_fit"),
        17: (json.dumps({"requests": [{"tokens": [1, 2]}]}), "input"),
    }
    for line, (text, _) in sorted(bad.items()):
        lines.insert(line - 1, text)
    lines.insert(20, "")  # a blank line is no item
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    kinds = {}
    for line_no, text in enumerate(path.read_text().splitlines(), start=1):
        for bad_text, kind in bad.values():
            if text == bad_text:
                kinds[line_no] = kind
    return path, kinds


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a pack folder except the wall-clock ``run.json``."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.json" and "report" not in p.parts
    }


def shard_lines(folder: Path) -> list[dict]:
    """Every line of every shard (each a plan of one wave), in order."""
    manifest = read_manifest(folder)
    lines = []
    for index in range(manifest["windows"]):
        path = folder / "shards" / f"window-{index:06d}.jsonl"
        lines.extend(json.loads(line) for line in path.read_text().splitlines())
    return lines


def shard_waves(folder: Path) -> list[dict]:
    """Every wave of every shard, in order."""
    return [line["waves"][0] for line in shard_lines(folder)]


def write_sharegpt(path: Path, num_conversations: int = 30, seed: int = 11) -> Path:
    """A ShareGPT JSON array of generated conversations (not the bundled tiny file): 1 to 4 exchanges of
    words drawn at random, some with a system prompt, one with a speaker no role maps (rejected)."""
    rng = np.random.default_rng(seed)
    words = ["tree", "wave", "rank", "token", "chunk", "prefix", "memory", "budget", "layer", "plan"]

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(words, size=int(rng.integers(low, high))))

    records = []
    for k in range(num_conversations):
        messages = [{"from": "system", "value": text(20, 60)}] if k % 3 == 0 else []
        for _ in range(int(rng.integers(1, 5))):
            messages += [{"from": "human", "value": text(10, 80)}, {"from": "gpt", "value": text(30, 200)}]
        if k == 7:
            messages[0]["from"] = "robot"
        records.append({"id": f"conv{k}", "conversations": messages})
    path.write_text(json.dumps(records, indent=1))
    return path


def sharegpt_budget(path: Path, cp: int = 2) -> int:
    """A per-rank budget (4 layers) a fortieth of the way from the largest conversation's full-sharing peak
    to all of them together: several waves per window, every conversation fits."""
    from cpplan.pack import load_tokenizer
    from cpplan.pack.conversations import conversation_item

    tokenizer = load_tokenizer("bytes")
    items = []
    for record in json.loads(path.read_text()):
        try:
            items.append(conversation_item(record, tokenizer, str(path), 1))
        except ValueError:
            continue
    problem = Problem.build(
        Workload(items=tuple(items)),
        Settings(topology=Topology(cp=cp), model=load_model(MODEL), memory_bytes=2**60, num_layers=4),
    )
    single = max(best_wave(problem, [i], ("full",))[0].peak_bytes for i in range(len(items)))
    whole = best_wave(problem, range(len(items)), ("full",))[0].peak_bytes
    return single + (whole - single) // 40

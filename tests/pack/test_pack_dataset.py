"""``cpplan.PackDataset``: a finished pack read back as one rank's batches, each wave on exactly one
data-parallel replica, token ids from the dataset the pack was made from; shards readable on their own."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import cpplan
from cpplan import InputError, PackDataset, Topology
from cpplan.pack import load_tokenizer, pack
from cpplan.pack.conversations import conversation_item
from cpplan.plans.plan_reader import read_plan_file
from tests.support import pack_data as tp


@pytest.fixture(scope="module")
def sharegpt_pack(tmp_path_factory):
    """A held-out ShareGPT dataset (generated here, not the bundled file) packed at dp=2, cp=2 in windows
    of 8 conversations with the bytes tokenizer."""
    tmp = tmp_path_factory.mktemp("sgpt")
    data = tp.write_sharegpt(tmp / "held_out.json")
    out = tmp / "out"
    manifest = pack(
        data,
        output=out,
        model=tp.MODEL,
        topology=Topology(cp=2, dp=2),
        memory_bytes=tp.sharegpt_budget(data),
        num_layers=4,
        solver=tp.profile_path(tmp),
        window=8,
        tokenizer="bytes",
    ).manifest
    return data, out, manifest


@pytest.fixture(scope="module")
def padded_pack(tmp_path_factory):
    """Six sequences of 5,000 tokens, each a wave of its own at 2.4 GiB (qwen3-8b, 2 layers), packed at
    dp=2, cp=2 in windows of 3: every window has three waves for two replicas, so equal waves (the
    default) pads one replica by one wave in each window."""
    tmp = tmp_path_factory.mktemp("padded")
    rng = np.random.default_rng(5)
    data = tmp / "long.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"s{k}", "tokens": rng.integers(0, 5000, 5000).tolist()}) + "\n"
            for k in range(6)
        )
    )
    out = tmp / "out"
    pack(
        data,
        output=out,
        model="qwen3-8b",
        topology=Topology(cp=2, dp=2),
        memory_bytes="2.4GiB",
        num_layers=2,
        solver=tp.profile_path(tmp),
        window=3,
    )
    return data, out, None


def _conversations(data) -> dict[str, cpplan.Item]:
    tokenizer = load_tokenizer("bytes")
    items = {}
    for record in json.loads(data.read_text()):
        try:
            items[record["id"]] = conversation_item(record, tokenizer, str(data), 1)
        except InputError:
            continue
    return items


def test_every_request_read_back_exactly_once_across_replicas_and_ranks(sharegpt_pack):
    """At dp=2, cp=2 the four (replica, rank) datasets together yield every wave of the pack on exactly
    one replica (in wave order, both CP ranks of it), and every planned request reads back exactly once,
    with the token ids the conversation tokenizes to."""
    data, out, manifest = sharegpt_pack
    assert manifest["waves"] >= 6 and manifest["windows"] >= 4 and manifest["items_rejected"] == 1
    conversations = _conversations(data)
    seen: dict[tuple[str, int], int] = {}
    waves_of: dict[int, list[int]] = {}
    for dp_rank in (0, 1):
        ranks = [_real(PackDataset(out, dp_rank=dp_rank, cp_rank=r)) for r in (0, 1)]
        assert [b.wave for b in ranks[0]] == [b.wave for b in ranks[1]]
        waves = [b.wave for b in ranks[0]]
        assert waves == sorted(waves)
        waves_of[dp_rank] = waves
        for first, second in zip(*ranks, strict=True):
            assert first.requests == second.requests and first.rank == 0 and second.rank == 1
            packed = torch.zeros(first.packed_tokens, dtype=torch.int64)
            for batch in (first, second):
                packed[batch.packed_index] = batch.input_ids
            for k, (item_id, index) in enumerate(first.requests):
                seen[(item_id, index)] = seen.get((item_id, index), 0) + 1
                expected = torch.tensor(conversations[item_id].requests[index].tokens)
                assert torch.equal(packed[first.readback(k)], expected)
    assert sorted(waves_of[0] + waves_of[1]) == list(range(manifest["waves"]))
    assert abs(len(waves_of[0]) - len(waves_of[1])) <= 1
    assert set(seen.values()) == {1}
    assert set(seen) == {(i, k) for i, item in conversations.items() for k in range(len(item.requests))}
    assert len(seen) == manifest["requests"]


def _real(dataset) -> list:
    """The real waves' batches of a rank's dataset (its padding entries left out)."""
    return [batch for batch in dataset if batch is not None]


def _shard_lines(out) -> list[list[dict]]:
    """Every window's shard lines, parsed."""
    shards = sorted((out / "shards").glob("window-*.jsonl"))
    return [[json.loads(t) for t in shard.read_text().splitlines() if t.strip()] for shard in shards]


def test_equal_waves_padding_is_yielded_as_none_so_every_gpu_runs_as_many_waves(padded_pack, tmp_path):
    """The dp=2 pack is made under equal waves (the default), and its windows give one replica a wave
    more than the other: replica 0's GPUs yield a ``None`` for that window's padding wave right
    after the window's real waves (where the shard lines' ``padding.waves`` put it), so every GPU's
    dataset has the same length and the same number of entries window by window (what FSDP needs), also
    through a DataLoader. A pack whose lines carry no ``padding`` (made before equal waves) still reads,
    as real waves only."""
    _, out, _ = padded_pack
    windows = _shard_lines(out)
    padding = [lines[0]["padding"]["waves"] for lines in windows]
    assert any(max(counts) > 0 for counts in padding), "the fixture pack has a padded window"
    entries = {}
    for g, (dp_rank, cp_rank) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        dataset = PackDataset(out, dp_rank=dp_rank, cp_rank=cp_rank)
        listed = [None if b is None else b.wave for b in dataset]
        assert len(dataset) == len(listed) == len(entries.get(0, listed))
        first, position = 0, 0
        for lines, counts in zip(windows, padding, strict=True):
            mine = [first + k for k, line in enumerate(lines) if g in line["waves"][0]["gpus"]]
            n = len(mine) + counts[g]
            assert listed[position : position + n] == [*mine, *[None] * counts[g]]
            first, position = first + len(lines), position + n
        assert position == len(listed)
        entries[g] = listed
    assert len({len(e) for e in entries.values()}) == 1 and any(None in e for e in entries.values())
    padded = next(g for g, e in entries.items() if None in e)
    loader = torch.utils.data.DataLoader(
        PackDataset(out, dp_rank=padded // 2, cp_rank=padded % 2), batch_size=None, num_workers=2
    )
    assert [None if b is None else b.wave for b in loader] == entries[padded]

    old = tmp_path / "old"
    shutil.copytree(out, old)
    for shard in (old / "shards").glob("window-*.jsonl"):
        lines = [json.loads(t) for t in shard.read_text().splitlines() if t.strip()]
        shard.write_text(
            "".join(json.dumps({k: v for k, v in line.items() if k != "padding"}) + "\n" for line in lines)
        )
    unpadded = [b.wave for b in PackDataset(old, dp_rank=padded // 2, cp_rank=padded % 2)]
    assert unpadded == [w for w in entries[padded] if w is not None]


def test_a_changed_dataset_is_refused_and_a_moved_one_can_be_named(sharegpt_pack, tmp_path):
    """A dataset whose bytes differ from the packed ones is an InputError; the same bytes under another
    path (``dataset=``) read as the original."""
    data, out, _ = sharegpt_pack
    moved = tmp_path / "moved.json"
    shutil.copy(data, moved)
    same = [b.requests for b in _real(PackDataset(out, dp_rank=1, cp_rank=0, dataset=moved))]
    assert same == [b.requests for b in _real(PackDataset(out, dp_rank=1, cp_rank=0))]
    moved.write_text(data.read_text().replace("tree", "TREE", 1))
    with pytest.raises(InputError, match="changed since it was packed"):
        PackDataset(out, dp_rank=0, cp_rank=0, dataset=moved)


def test_ranks_out_of_range_and_unfinished_packs_are_refused(sharegpt_pack, tmp_path):
    """dp_rank and cp_rank must lie within the pack's topology; a pack whose manifest is not complete is
    refused."""
    _, out, _ = sharegpt_pack
    with pytest.raises(InputError, match="dp_rank"):
        PackDataset(out, dp_rank=2, cp_rank=0)
    with pytest.raises(InputError, match="cp_rank"):
        PackDataset(out, dp_rank=0, cp_rank=True)
    partial = tmp_path / "partial"
    shutil.copytree(out, partial)
    manifest = json.loads((partial / "manifest.json").read_text())
    (partial / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    with pytest.raises(InputError, match="not finished"):
        PackDataset(partial, dp_rank=0, cp_rank=0)


def test_dataloader_workers_keep_the_order(sharegpt_pack):
    """Through a DataLoader with two workers (batch_size=None) a replica gets the same waves, in order."""
    _, out, _ = sharegpt_pack
    dataset = PackDataset(out, dp_rank=0, cp_rank=1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    assert [(b.wave, b.requests) for b in _real(loader)] == [(b.wave, b.requests) for b in _real(dataset)]


def test_a_shard_line_and_a_shard_file_materialize_on_their_own(tmp_path):
    """One shard line is a plan of one wave and a shard file a plan of its window: `materialize` takes
    either with the workload file, without the manifest."""
    data, _ = tp.write_dataset(tmp_path)
    out = tmp_path / "out"
    pack(data, output=out, solver=tp.profile_path(tmp_path), window=16, **tp.SETTINGS)
    workload = cpplan.Workload.from_jsonl(_good(tmp_path))
    shards = sorted((out / "shards").glob("window-*.jsonl"))
    shard = next(s for s in shards if len(s.read_text().splitlines()) >= 2)  # a window of two waves or more
    line = json.loads(shard.read_text().splitlines()[1])
    from_line = cpplan.materialize(line, workload, wave=0, rank=1)
    from_file = cpplan.materialize(shard, workload, wave=1, rank=1)
    assert from_line.requests == from_file.requests and torch.equal(from_line.input_ids, from_file.input_ids)
    assert read_plan_file(shard)["num_waves"] == len(shard.read_text().splitlines())


def _good(tmp_path):
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(tp.workload_lines()) + "\n")
    return path

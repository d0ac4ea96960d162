"""Inputs people have: Hugging Face-style records, JSON arrays of items, mapped field names, poison lines
that must not stop a pack, a byte-order mark, and a dataset named by another path on resume."""

from __future__ import annotations

import json
import shutil

import pytest

from cpplan.cli import main
from cpplan.pack import pack, read_manifest
from tests.support import pack_data as tp


def _hf_lines(num: int = 12) -> list[str]:
    """Hugging Face-style lines (no id) made from the GRPO items: each request a line, labels masking
    the first half of every sequence."""
    lines = []
    for text in tp.workload_lines(4)[:num]:
        for request in json.loads(text)["requests"]:
            tokens = request["tokens"]
            half = len(tokens) // 2
            lines.append(json.dumps({"input_ids": tokens, "labels": [-100] * half + tokens[half:]}))
    return lines


def test_hugging_face_jsonl_without_ids_packs(tmp_path):
    """`input_ids`/`labels` lines without ids pack: every line is planned under its line number as id."""
    data = tmp_path / "hf.jsonl"
    lines = _hf_lines()
    data.write_text("\n".join(lines) + "\n")
    outcome = pack(data, output=tmp_path / "out", solver=tp.profile_path(tmp_path), **tp.SETTINGS)
    assert outcome.manifest["items_planned"] == len(lines) and outcome.manifest["items_rejected"] == 0
    planned = sorted(int(i) for wave in tp.shard_waves(tmp_path / "out") for i in wave["items"])
    assert planned == list(range(1, len(lines) + 1))


def test_parquet_with_input_ids_and_mapped_fields(tmp_path, capsys):
    """Parquet rows with `ids` and `uid` columns pack with `--tokens-field ids --id-field uid`; without
    them the run is refused naming the columns it found."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"uid": k, "ids": json.loads(line)["input_ids"]} for k, line in enumerate(_hf_lines())]
    data = tmp_path / "hf.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data, row_group_size=5)
    args = ["pack", str(data), *tp.CLI_SETTINGS, "--solver", str(tp.profile_path(tmp_path)), "--quiet"]
    assert main([*args, "--output", str(tmp_path / "a")]) == 2
    assert "found ['ids', 'uid']" in capsys.readouterr().err
    mapped = [*args, "--output", str(tmp_path / "b"), "--tokens-field", "ids", "--id-field", "uid"]
    assert main(mapped) == 0
    planned = sorted(int(i) for wave in tp.shard_waves(tmp_path / "b") for i in wave["items"])
    assert planned == list(range(len(rows)))


def test_json_array_of_items_needs_no_tokenizer(tmp_path):
    """A `.json` array of item records packs as items: no tokenizer is loaded (an unknown one is fine)."""
    data = tmp_path / "items.json"
    records = [json.loads(line) for line in tp.workload_lines(8)]
    data.write_text(json.dumps(records, indent=1))
    outcome = pack(
        data,
        output=tmp_path / "out",
        solver=tp.profile_path(tmp_path),
        tokenizer="no-such-model",
        **tp.SETTINGS,
    )
    assert outcome.manifest["items_planned"] == len(records)


def test_poison_lines_are_rejected_and_the_pack_goes_on(tmp_path):
    """A token of 5,000 digits, brackets nested 100,000 deep and a byte that is not UTF-8 are rejected
    with their lines; every other line (a byte-order mark on line 1 included) is planned."""
    good = tp.workload_lines(6)
    poison = {
        3: '{"id": "digits", "tokens": [' + "7" * 5000 + "]}",
        6: "[" * 100_000 + "]" * 100_000,
        9: '{"id": "nested", "tokens": ' + "[" * 100_000 + "]" * 100_000 + "}",
    }
    lines = list(good)
    for line, text in sorted(poison.items()):
        lines.insert(line - 1, text)
    data = tmp_path / "poison.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b'\n{"id": "\xff"}\n')
    outcome = pack(data, output=tmp_path / "out", solver=tp.profile_path(tmp_path), window=4, **tp.SETTINGS)
    rejects = [json.loads(t) for t in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [3, 6, 9, len(lines) + 1]
    assert "digits" in rejects[0]["reason"] and "nested too deeply" in rejects[1]["reason"]
    assert "not UTF-8" in rejects[3]["reason"]
    assert outcome.manifest["items_planned"] == len(good)


def test_a_rejected_line_keeps_the_id_it_names(tmp_path):
    """A line that does not parse is rejected under the id it names, an integer id written in decimal as
    the item would have had it; only a line without a readable id is rejected with id null."""
    lines = tp.workload_lines(4)
    lines += ['{"id": 7, "tokens": [1, 2.5]}', '{"id": "s", "tokens": []}', '{"tokens": [1.5]}']
    data = tmp_path / "ids.jsonl"
    data.write_text("\n".join(lines) + "\n")
    outcome = pack(data, output=tmp_path / "out", solver=tp.profile_path(tmp_path), **tp.SETTINGS)
    rejects = [json.loads(t) for t in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["id"]) for r in rejects] == [(5, "7"), (6, "s"), (7, None)]
    assert outcome.manifest["items_planned"] == 4


def test_poison_record_in_a_json_array_is_skipped(tmp_path):
    """Inside a JSON array, a record the parser rejects (too many digits, too deep) is rejected and the
    records after it are still read and planned."""
    records = [json.dumps(json.loads(line)) for line in tp.workload_lines(6)]
    records.insert(2, '{"id": "digits", "tokens": [' + "7" * 5000 + "]}")
    records.insert(4, '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    data = tmp_path / "items.json"
    data.write_text("[\n" + ",\n".join(records) + "\n]\n")
    outcome = pack(data, output=tmp_path / "out", solver=tp.profile_path(tmp_path), **tp.SETTINGS)
    rejects = [json.loads(t) for t in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["record"], r["kind"]) for r in rejects] == [(3, "input"), (5, "input")]
    assert outcome.manifest["items_planned"] == 6


def test_resume_compares_the_dataset_by_content(tmp_path, monkeypatch, capsys):
    """A pack started with a relative dataset path resumes when rerun with the absolute path, or with a
    copy elsewhere (the manifest records the path used last); a dataset with other bytes is refused."""
    data, _ = tp.write_dataset(tmp_path)
    out = tmp_path / "out"
    base = [*tp.CLI_SETTINGS, "--output", str(out), "--solver", str(tp.profile_path(tmp_path)), "--quiet"]
    monkeypatch.chdir(tmp_path)
    assert main(["pack", data.name, *base]) == 0
    assert main(["pack", str(data.resolve()), *base]) == 0
    assert json.loads((out / "run.json").read_text())["items"] == 0
    copy = tmp_path / "copy.jsonl"
    shutil.copy(data, copy)
    assert main(["pack", str(copy.resolve()), *base]) == 0
    assert read_manifest(out)["dataset"] == str(copy.resolve())
    copy.write_text(data.read_text().replace('"p1"', '"q1"'))
    assert main(["pack", str(copy), *base]) == 2
    assert "other settings (dataset_sha256)" in capsys.readouterr().err

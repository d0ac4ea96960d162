"""Crash and resume: a `cpplan pack` killed with SIGKILL at any point of a commit, or from outside at
any time, and then rerun, leaves exactly the folder an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpplan.pack import pack, read_manifest
from tests.support import pack_data as tp

pytestmark = pytest.mark.slow  # kills and reruns pack processes

CPPLAN = str(Path(sys.executable).parent / "cpplan")


def command(data: Path, out: Path, profile: Path, window: int) -> list[str]:
    """The CLI call of these tests."""
    options = ["--output", str(out), "--window", str(window), "--solver", str(profile), "--quiet"]
    return [CPPLAN, "pack", str(data), *tp.CLI_SETTINGS, *options]


def reference(tmp_path: Path, data: Path, profile: Path, window: int) -> dict[str, bytes]:
    """The folder of an uninterrupted run."""
    pack(data, output=tmp_path / "reference", solver=profile, window=window, **tp.SETTINGS)
    return tp.folder_bytes(tmp_path / "reference")


@pytest.mark.parametrize("stage", ["shard", "windows", "rejects", "manifest"])
def test_kill_during_a_commit_then_rerun_gives_the_uninterrupted_output(tmp_path, stage):
    """SIGKILL after each step of committing window 3 (the window holding the no-fit reject): the
    manifest is incomplete, and a plain rerun completes the folder byte for byte as an uninterrupted
    run, with every item counted once."""
    data, _ = tp.write_dataset(tmp_path)
    profile = tp.profile_path(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "CPPLAN_PACK_KILL_AT": f"3:{stage}"}
    killed = subprocess.run(command(data, out, profile, 4), env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    manifest = read_manifest(out)
    assert manifest["complete"] is False
    assert manifest["windows"] == (4 if stage == "manifest" else 3)
    rerun = subprocess.run(command(data, out, profile, 4), capture_output=True, timeout=300, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert tp.folder_bytes(out) == reference(tmp_path, data, profile, 4)
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_windows"] == manifest["windows"]


def test_kill_9_from_outside_mid_run_then_rerun(tmp_path):
    """`kill -9` sent from outside once some windows are committed; the rerun resumes from the
    manifest (not from scratch) and the folder equals an uninterrupted run's."""
    data, _ = tp.write_dataset(tmp_path, num_prompts=60)
    profile = tp.profile_path(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        command(data, out, profile, 1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                if read_manifest(out)["windows"] >= 5:
                    break
            except ValueError:
                pass
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    manifest = read_manifest(out)
    assert proc.returncode == -signal.SIGKILL
    assert manifest["complete"] is False and manifest["windows"] >= 5
    rerun = subprocess.run(command(data, out, profile, 1), capture_output=True, timeout=300, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads((out / "run.json").read_text())["resumed_windows"] >= 5
    assert tp.folder_bytes(out) == reference(tmp_path, data, profile, 1)


def test_rerun_of_a_complete_pack_changes_nothing(tmp_path):
    """Running again on a finished folder plans nothing and leaves every file as it was."""
    data, _ = tp.write_dataset(tmp_path)
    profile = tp.profile_path(tmp_path)
    out = tmp_path / "out"
    pack(data, output=out, solver=profile, window=4, **tp.SETTINGS)
    before = tp.folder_bytes(out)
    outcome = pack(data, output=out, solver=profile, window=4, **tp.SETTINGS)
    assert outcome.run["items"] == 0
    assert tp.folder_bytes(out) == before


@pytest.mark.parametrize("fmt", ["sharegpt", "parquet"])
def test_resume_reads_on_from_the_cursor_in_every_format(tmp_path, fmt):
    """For ShareGPT JSON (a byte offset inside one JSON array) and Parquet (a row number), a run killed
    after committing window 1 resumes from the manifest's cursor and ends byte-identical."""
    profile = tp.profile_path(tmp_path)
    if fmt == "sharegpt":
        data, extra, window = tp.SHAREGPT, ["--tokenizer", "bytes"], 2
    else:
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        rows = [json.loads(line) for line in tp.workload_lines()]
        data, extra, window = tmp_path / "data.parquet", [], 5
        pq.write_table(pa.Table.from_pylist(rows), data, row_group_size=4)
    out = tmp_path / "out"
    env = {**os.environ, "CPPLAN_PACK_KILL_AT": "1:manifest"}
    killed = subprocess.run([*command(data, out, profile, window), *extra], env=env, capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    assert read_manifest(out)["cursor"]["ordinal"] == 2 * window
    rerun = subprocess.run([*command(data, out, profile, window), *extra], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    tokenizer = {"tokenizer": "bytes"} if fmt == "sharegpt" else {}
    pack(data, output=tmp_path / "reference", solver=profile, window=window, **tokenizer, **tp.SETTINGS)
    assert tp.folder_bytes(out) == tp.folder_bytes(tmp_path / "reference")

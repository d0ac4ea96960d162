"""The output folder of a packing run: plan shards, rejects, the window log and the manifest.

Layout of ``OUTDIR``::

    manifest.json        totals, configuration, the dataset's path, resume cursor and the sizes of the
                         two logs
    shards/window-NNNNNN.jsonl   one planned wave a line, each a plan of its own (settings, workload
                         digest, the window's position in the input, the wave)
    windows.jsonl        one line of figures per committed window
    rejects.jsonl        one line per rejected item: line, record, id, kind, reason
    run.json             wall-clock figures of the last run (the only file that differs between runs)

A window is committed in this order: its shard (written to a temporary file and renamed), its
lines appended to ``windows.jsonl`` and ``rejects.jsonl`` (flushed to disk), then the manifest
(temporary file and rename). The manifest rename is the commit point: after a crash, a rerun cuts
both logs back to the sizes the manifest records, drops shards it does not list, and reads the input
from the manifest's cursor, so the finished folder is byte-for-byte the one an uninterrupted run
writes.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from cpplan.errors import InputError
from cpplan.pack.readers import Cursor
from cpplan.pack.windows import WindowResult, plan_figures

MANIFEST = "manifest.json"
WINDOWS = "windows.jsonl"
REJECTS = "rejects.jsonl"
RUN = "run.json"
SHARDS = "shards"
FORMAT = "cpplan-pack/2"
KILL_AT = "CPPLAN_PACK_KILL_AT"
ADDITIVE = (
    "items_in",
    "items_planned",
    "items_rejected",
    "requests",
    "waves",
    "logical_tokens",
    "packed_tokens",
)


def _crash_point(index: int, stage: str) -> None:
    """Fault injection for the crash tests: ``CPPLAN_PACK_KILL_AT=WINDOW:STAGE`` kills the process
    (SIGKILL, as ``kill -9``) at that point of committing window ``WINDOW``."""
    if os.environ.get(KILL_AT) == f"{index}:{stage}":
        os.kill(os.getpid(), signal.SIGKILL)


def shard_name(index: int) -> str:
    """The shard path of window ``index``, relative to the output folder."""
    return f"{SHARDS}/window-{index:06d}.jsonl"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, flushed, then renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def _append(path: Path, text: str) -> int:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
        return handle.tell()


def _zero_totals() -> dict[str, Any]:
    totals: dict[str, Any] = dict.fromkeys(ADDITIVE, 0)
    totals.update(cost_s=0.0, max_local_tokens=0, mean_local_tokens=0.0, peak_bytes=0)
    totals["baseline"] = {**plan_figures(None), "items_unplaced": 0}
    return totals


def _add(totals: dict[str, Any], stats: dict[str, Any]) -> None:
    for key in (*ADDITIVE, "cost_s", "max_local_tokens", "mean_local_tokens"):
        totals[key] += stats[key]
    totals["peak_bytes"] = max(totals["peak_bytes"], stats["peak_bytes"])
    for key, value in stats["baseline"].items():
        totals["baseline"][key] += value


class OutDir:
    """The state of one output folder: open (fresh or resumed), commit windows, finish."""

    def __init__(self, path: Path, config: dict[str, Any], *, dataset: str, restart: bool = False) -> None:
        self.path = path
        self.config = config
        self.dataset = dataset
        path.mkdir(parents=True, exist_ok=True)
        (path / SHARDS).mkdir(exist_ok=True)
        manifest = self._read_manifest()
        if manifest is not None and not restart and manifest.get("config") != config:
            changed = sorted(
                k
                for k in set(config) | set(manifest.get("config", {}))
                if config.get(k) != manifest.get("config", {}).get(k)
            )
            raise InputError(
                f"holds a pack made with other settings ({', '.join(changed)}); pass --restart to "
                "discard it, or choose another --output",
                file=str(path / MANIFEST),
            )
        if manifest is None or restart:
            manifest = self._fresh()
        manifest["dataset"] = dataset
        self.manifest = manifest
        self._recover()

    def _read_manifest(self) -> dict[str, Any] | None:
        file = self.path / MANIFEST
        if not file.exists():
            return None
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"unreadable manifest ({exc}); pass --restart", file=str(file)) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{_not_this_format(data)}; pass --restart", file=str(file))
        return data

    def _fresh(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "dataset": self.dataset,
            "complete": False,
            **_zero_totals(),
            "windows": 0,
            "cursor": Cursor().to_dict(),
            "windows_bytes": 0,
            "rejects_bytes": 0,
            "config": self.config,
        }

    def _recover(self) -> None:
        """Cut the logs back to the manifest and drop files a crashed run left behind."""
        for name, key in ((WINDOWS, "windows_bytes"), (REJECTS, "rejects_bytes")):
            file = self.path / name
            with file.open("a+b") as handle:
                handle.truncate(self.manifest[key])
        listed = {shard_name(i).split("/")[1] for i in range(self.manifest["windows"])}
        for file in (self.path / SHARDS).iterdir():
            if file.name not in listed:
                file.unlink()
        for file in self.path.glob("*.tmp"):
            file.unlink()
        write_atomic(self.path / MANIFEST, self._text())

    @property
    def complete(self) -> bool:
        """Whether the run finished."""
        return bool(self.manifest["complete"])

    @property
    def num_windows(self) -> int:
        """Windows committed so far."""
        return int(self.manifest["windows"])

    @property
    def cursor(self) -> Cursor:
        """Where reading resumes."""
        return Cursor.from_dict(self.manifest["cursor"])

    def _text(self) -> str:
        return json.dumps(self.manifest, indent=1, allow_nan=False) + "\n"

    def commit(self, result: WindowResult) -> None:
        """Make one window durable (see the module docstring for the order)."""
        assert result.index == self.num_windows, (result.index, self.num_windows)
        write_atomic(self.path / shard_name(result.index), result.shard)
        _crash_point(result.index, "shard")
        windows_bytes = _append(
            self.path / WINDOWS, json.dumps({"shard": shard_name(result.index), **result.stats}) + "\n"
        )
        _crash_point(result.index, "windows")
        rejects_bytes = _append(self.path / REJECTS, result.rejects)
        _crash_point(result.index, "rejects")
        _add(self.manifest, result.stats)
        self.manifest.update(
            windows=self.num_windows + 1,
            cursor=result.end.to_dict(),
            windows_bytes=windows_bytes,
            rejects_bytes=rejects_bytes,
        )
        write_atomic(self.path / MANIFEST, self._text())
        _crash_point(result.index, "manifest")

    def finish(self, run: dict[str, Any]) -> None:
        """Mark the pack complete and record this run's wall-clock figures beside it."""
        assert self.manifest["items_in"] == self.manifest["items_planned"] + self.manifest["items_rejected"]
        self.manifest["complete"] = True
        write_atomic(self.path / MANIFEST, self._text())
        write_atomic(self.path / RUN, json.dumps(run, indent=1) + "\n")


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a pack folder (an :class:`InputError` when there is none)."""
    file = path / MANIFEST
    if not path.exists():
        raise InputError("does not exist (give the --output folder of a cpplan pack)", file=str(path))
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no manifest.json: not a cpplan pack folder", file=str(path)) from None
    except NotADirectoryError:
        raise InputError("a file, not a cpplan pack folder", file=str(path)) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable manifest: {exc}", file=str(file)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(_not_this_format(data), file=str(file))
    return data


def _not_this_format(data: Any) -> str:
    """Why a manifest is not one this cpplan reads."""
    found = data.get("format") if isinstance(data, dict) else None
    if isinstance(found, str) and found.startswith("cpplan-pack/"):
        return f"a {found} pack, made by an older cpplan (this one writes and reads {FORMAT}): pack it again"
    return f"not a {FORMAT} manifest"

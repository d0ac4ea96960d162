"""Process trees under /proc, for the tests that kill a packing run."""

from __future__ import annotations

import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (gone and zombie processes do not count)."""
    return [pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] not in ("Z", "X")]


def command_line(pid: int) -> str:
    """The process's command line, spaces between arguments ('' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait up to ``timeout_s`` for ``pids`` to stop; those still running then."""
    deadline = time.monotonic() + timeout_s
    while (left := running(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left

"""Engines run :func:`plan_window` over a stream of windows and yield results in window order.

At most ``2 × workers`` windows are in flight at once, so memory stays flat however long the input.
``local`` runs in this process (one worker) or in a process pool; ``ray`` runs each window as a Ray
task (``pip install 'cpplan[ray]'``), on a running cluster when one is reachable (``RAY_ADDRESS`` or an
already initialized Ray) and otherwise on a local Ray started with ``workers`` CPUs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Literal

from cpplan.errors import InputError
from cpplan.pack.windows import PackContext, WindowJob, WindowResult, plan_window

Engine = Literal["local", "ray"]
ENGINES = ("local", "ray")

PARENT_POLL_S = 0.5
_CONTEXT: PackContext | None = None


def _init_worker(ctx: PackContext, parent_pid: int) -> None:
    global _CONTEXT
    _CONTEXT = ctx
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    watch_parent(parent_pid)


def watch_parent(pid: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """Exit this process within ``poll_s`` seconds of process ``pid`` dying (``kill -9`` included): a pool
    worker blocked on its task pipe would otherwise outlive the packing run that started it."""
    start = _start_time(pid)

    def watch() -> None:
        while _alive(pid, start):
            time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="cpplan-parent-watch", daemon=True)
    thread.start()
    return thread


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (``None`` when there is no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> str | None:
    if not Path("/proc/self/stat").exists():
        return None
    fields = _proc_stat(pid)
    return None if fields is None else fields[19]


def _alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` still runs: not gone, not a zombie, and (with ``/proc``) not a reused pid."""
    if start is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = _proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and fields[19] == start


def _run_in_worker(job: WindowJob) -> WindowResult:
    assert _CONTEXT is not None
    return plan_window(job, _CONTEXT)


def _in_order(submit, jobs: Iterable[WindowJob], in_flight: int, wait) -> Iterator[WindowResult]:
    pending: deque = deque()
    for job in jobs:
        pending.append(submit(job))
        if len(pending) >= in_flight:
            yield wait(pending.popleft())
    while pending:
        yield wait(pending.popleft())


def run_local(jobs: Iterable[WindowJob], ctx: PackContext, workers: int) -> Iterator[WindowResult]:
    """Windows in this process (``workers == 1``) or in a pool of ``workers`` processes."""
    if workers <= 1:
        for job in jobs:
            yield plan_window(job, ctx)
        return
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context(method),
        initializer=_init_worker,
        initargs=(ctx, os.getpid()),
    )
    try:
        yield from _in_order(
            lambda job: pool.submit(_run_in_worker, job), jobs, 2 * workers, lambda f: f.result()
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'cpplan[ray]'", field="engine") from None
    return ray


def run_ray(jobs: Iterable[WindowJob], ctx: PackContext, workers: int) -> Iterator[WindowResult]:
    """Windows as Ray tasks, ``2 × workers`` in flight, results taken in window order."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False)
        started = True
    try:
        task = ray.remote(plan_window)
        ctx_ref = ray.put(ctx)
        in_flight = 2 * max(workers, int(ray.available_resources().get("CPU", 1)))
        yield from _in_order(lambda job: task.remote(job, ctx_ref), jobs, in_flight, ray.get)
    finally:
        if started:
            ray.shutdown()


def run_windows(
    jobs: Iterable[WindowJob], ctx: PackContext, *, engine: Engine, workers: int
) -> Iterator[WindowResult]:
    """Dispatch to the named engine."""
    if engine == "local":
        return run_local(jobs, ctx, workers)
    if engine == "ray":
        return run_ray(jobs, ctx, workers)
    raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}", field="engine")

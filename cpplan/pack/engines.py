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
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Literal

from cpplan.errors import InputError
from cpplan.pack.windows import PackContext, WindowJob, WindowResult, plan_window

Engine = Literal["local", "ray"]
ENGINES = ("local", "ray")

_CONTEXT: PackContext | None = None


def _init_worker(ctx: PackContext) -> None:
    global _CONTEXT
    _CONTEXT = ctx
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


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
        initargs=(ctx,),
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

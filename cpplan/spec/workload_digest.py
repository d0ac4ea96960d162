"""Digests of the requests a plan holds, so a plan can tell the workload it was made for from another.

A wave's digest is the SHA-256 of its requests in the order the wave lists them: each request's item id,
its index in the item and every field of :class:`~cpplan.spec.workload.Request` (token ids, flags,
loss mask). A plan's digest is the SHA-256 of its waves' digests in wave order, so a shard of one wave
and the file of a whole window agree with the plan they are part of.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from cpplan.spec.workload import Request, Workload

RequestKey = tuple[str, int]


def _field_bytes(value: Any) -> bytes:
    if value is None:
        return b"-"
    if isinstance(value, np.ndarray):
        return f"{value.dtype.str}{value.shape}".encode() + np.ascontiguousarray(value).tobytes()
    return repr(value).encode()


def request_digest(hasher: Any, item_id: str, index: int, request: Request) -> None:
    """Feed one request (its item id, index and every field) to ``hasher``."""
    head = item_id.encode()
    hasher.update(len(head).to_bytes(8, "little") + head + index.to_bytes(8, "little"))
    for name in sorted(type(request).model_fields):
        data = _field_bytes(getattr(request, name))
        hasher.update(name.encode() + b"=" + len(data).to_bytes(8, "little") + data)


def wave_digest(workload: Workload, keys: Iterable[RequestKey]) -> str:
    """The SHA-256 of the requests ``keys`` (item id, request index) of ``workload``, in that order; a
    key the workload lacks raises :class:`KeyError` naming it."""
    hasher = hashlib.sha256()
    index_of = workload.index_of
    for item_id, k in keys:
        if item_id not in index_of:
            raise KeyError((item_id, k))
        requests = workload.items[index_of[item_id]].requests
        if not 0 <= k < len(requests):
            raise KeyError((item_id, k))
        request_digest(hasher, item_id, k, requests[k])
    return hasher.hexdigest()


def plan_digest(wave_digests: Sequence[str]) -> str:
    """The SHA-256 of a plan's wave digests, in wave order."""
    return hashlib.sha256("".join(wave_digests).encode()).hexdigest()


def wave_keys(wave: dict[str, Any]) -> list[RequestKey]:
    """The ``(item id, request index)`` of each request a plan-JSON wave lists, in its order."""
    return [(entry["item"], entry["request"]) for entry in wave["requests"]]


def workload_summary(workload: Workload, waves: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The plan JSON's ``workload`` object for plan-JSON ``waves`` made from ``workload``: items, requests,
    each wave's digest and the plan's digest."""
    digests = [wave_digest(workload, wave_keys(wave)) for wave in waves]
    items = {item for wave in waves for item in wave["items"]}
    return {
        "items": len(items),
        "requests": sum(len(wave["requests"]) for wave in waves),
        "sha256": plan_digest(digests),
        "wave_sha256": digests,
    }

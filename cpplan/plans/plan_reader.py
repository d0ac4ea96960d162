"""Reading plan JSON back: the inverse of :mod:`cpplan.plans.plan_writer` for what a runtime needs, by the
field names of :mod:`cpplan.plans.plan_fields`.

A plan file's wave becomes :class:`WaveArrays` (the segment tree, each request's chain of segments and
every packed token's owning CP rank), checked field by field against the workload it was made for; each
problem is an :class:`~cpplan.errors.InputError` naming the JSON field (``waves[2].requests[5].segments``).
The same arrays come from an in-memory :class:`~cpplan.pricing.wave.WavePlan` too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cpplan.errors import InputError
from cpplan.plans.plan_fields import GDN_HANDOFF_MODES, SETTINGS_FIELDS, TOTAL_FIELDS
from cpplan.plans.pool_schedule import dp_rank_of, pool_rank_waves
from cpplan.pricing.handoff_mode import ROUNDS
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.wave import WavePlan
from cpplan.spec.workload import Workload
from cpplan.spec.workload_digest import plan_digest, wave_digest


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveArrays:
    """One wave's segments, request chains and token owners, from a WavePlan or from plan JSON.

    Segment and chain arrays mean what they mean in :class:`~cpplan.pricing.layout.PackedLayout`
    (``request_ids`` index the workload's requests in flattened (item, request) order);
    ``token_owner`` is the CP rank of every packed token.
    """

    num_ranks: int
    chunk_tokens: int
    request_ids: np.ndarray
    seg_parent: np.ndarray
    seg_position: np.ndarray
    seg_length: np.ndarray
    seg_offset: np.ndarray
    seg_src: np.ndarray
    request_ptr: np.ndarray
    request_segments: np.ndarray
    token_owner: np.ndarray

    @classmethod
    def from_wave_plan(cls, wp: WavePlan) -> WaveArrays:
        """The arrays of a priced wave (already consistent: nothing to check)."""
        layout = wp.layout
        return cls(
            num_ranks=int(wp.quantities.shape[0]),
            chunk_tokens=wp.stats.chunk_tokens,
            request_ids=layout.request_ids,
            seg_parent=layout.seg_parent,
            seg_position=layout.seg_position,
            seg_length=layout.seg_length,
            seg_offset=layout.seg_offset,
            seg_src=layout.seg_src,
            request_ptr=layout.request_ptr,
            request_segments=layout.request_segments,
            token_owner=np.repeat(wp.owner.astype(np.int64), wp.stats.tokens),
        )

    @property
    def num_segments(self) -> int:
        """Segments of the wave."""
        return int(self.seg_length.size)

    @property
    def packed_tokens(self) -> int:
        """Tokens in the wave's packed sequence."""
        return int(self.seg_length.sum())


def read_plan_file(path: str | Path) -> Any:
    """The decoded JSON of a plan file (checked by :func:`plan_waves` and :func:`read_wave`): a plan JSON
    object, or a shard of ``cpplan pack`` (JSONL, one one-wave plan a line), merged into one plan."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read plan: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", file=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise InputError(f"malformed JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"malformed JSON: {exc}", file=str(path)) from None
    return merge_plan_lines(_jsonl_plans(text, str(path)), str(path))


def _jsonl_plans(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """Each non-blank line of a shard file as a plan object, with its line number."""
    plans = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"malformed JSON: {exc}", file=source, line=number) from None
        if not isinstance(data, dict) or not isinstance(data.get("waves"), list):
            raise InputError(
                "not a plan line: a shard line is a plan of one wave (written by cpplan pack 0.2 and later)",
                file=source,
                line=number,
            )
        plans.append((number, data))
    return plans


def _window_cost(header: dict[str, Any], waves: list[dict[str, Any]]) -> float:
    """A window's cost from its waves: the makespan of their schedule under ``dp > 1`` or dynamic CP
    (with each pool rank's padding waves under equal waves), the sum of their costs otherwise."""
    topology = header.get("topology") if isinstance(header.get("topology"), dict) else {}
    costs = [float(w.get("cost_s", 0.0)) for w in waves]
    padding = padding_waves(header)
    if padding:
        finish = [0.0] * len(padding)
        for w, c in zip(waves, costs, strict=True):
            for g in w.get("gpus") or []:
                if isinstance(g, int) and 0 <= g < len(finish):
                    finish[g] = max(finish[g], float(w.get("start_s", 0.0)) + c)
        each = float(header["padding"].get("wave_cost_s", 0.0))
        return max(f + n * each for f, n in zip(finish, padding, strict=True))
    if topology.get("dynamic_cp") or int(topology.get("dp", 1)) > 1:
        return max(float(w.get("start_s", 0.0)) + c for w, c in zip(waves, costs, strict=True))
    return math.fsum(costs)


def padding_waves(data: dict[str, Any]) -> list[int]:
    """Each pool rank's empty padding waves, from a plan's ``padding`` object (empty when the plan was
    made without equal waves)."""
    padding = data.get("padding")
    if padding is None:
        return []
    counts = padding.get("waves") if isinstance(padding, dict) else None
    if not isinstance(counts, list) or not all(isinstance(n, int) and n >= 0 for n in counts):
        raise InputError("must be an object whose waves are counts of empty waves", field="padding")
    return counts


def merge_plan_lines(plans: list[tuple[int, dict[str, Any]]], source: str) -> dict[str, Any]:
    """One plan from the one-wave plans of a shard file (the waves in line order, totals added up, the
    workload digests chained); every line must share the settings and the pack window."""
    first = plans[0][1]
    for number, data in plans[1:]:
        for key in (*SETTINGS_FIELDS, "strategy"):
            if data.get(key) != first.get(key):
                raise InputError(f"differs from line {plans[0][0]}'s", file=source, line=number, field=key)
        if (data.get("pack") or {}).get("window") != (first.get("pack") or {}).get("window"):
            raise InputError(
                "lines of two pack windows: verify one shard file at a time, or the whole pack folder",
                file=source,
                line=number,
                field="pack.window",
            )
    waves = [wave for _, data in plans for wave in data["waves"]]
    merged = {key: first[key] for key in first if key not in ("workload", "pack", "waves")}
    totals = {
        "cost_s": _window_cost(first, waves),
        "num_waves": len(waves),
        "logical_tokens": sum(int(data.get("logical_tokens", 0)) for _, data in plans),
        "packed_tokens": sum(int(data.get("packed_tokens", 0)) for _, data in plans),
        "peak_bytes": max(int(data.get("peak_bytes", 0)) for _, data in plans),
    }
    assert tuple(totals) == TOTAL_FIELDS, "a merged plan adds up every total"
    merged.update(totals)
    summaries = [data.get("workload") for _, data in plans]
    if all(isinstance(w, dict) and isinstance(w.get("wave_sha256"), list) for w in summaries):
        digests = [d for w in summaries for d in w["wave_sha256"]]
        merged["workload"] = {
            "items": len({item for wave in waves for item in wave.get("items", [])}),
            "requests": sum(int(w.get("requests", 0)) for w in summaries),
            "sha256": plan_digest(digests),
            "wave_sha256": digests,
        }
    if "pack" in first:
        merged["pack"] = {k: v for k, v in first["pack"].items() if k != "wave"}
    merged["waves"] = waves
    return merged


def rank_waves(
    waves: Sequence[dict[str, Any]], *, first: int, cp: int, dp: int, pool_rank: int
) -> list[tuple[int, int]]:
    """The ``(wave, wave rank)`` pairs GPU ``pool_rank`` of the ``dp * cp`` pool runs among ``waves``
    (plan-JSON wave objects numbered from ``first``), in schedule order: the one place the assignment
    rule is applied when a plan or a pack is read back. A wave runs on its ``gpus`` (rank ``r`` on
    ``gpus[r]``), in order of ``start_s``; a wave without them (plan JSON written before schedules)
    goes to replica ``number mod dp``, ranks ``0 .. cp - 1`` of its block. Every wave runs on exactly
    one group of GPUs."""
    gpus, starts = [], []
    for k, wave in enumerate(waves):
        group = wave.get("gpus")
        if group is None:
            replica = dp_rank_of(first + k, dp)
            group = list(range(replica * cp, replica * cp + int(wave.get("cp", cp))))
        if not isinstance(group, list) or not all(isinstance(g, int) and g >= 0 for g in group):
            raise InputError("must be a list of pool ranks", field=f"waves[{first + k}].gpus")
        start = wave.get("start_s", float(first + k))
        gpus.append(group)
        starts.append(float(start) if isinstance(start, int | float) else float(first + k))
    return pool_rank_waves(gpus, starts, pool_rank)


def plan_waves(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's ``waves``, which must be a list of objects."""
    waves = data.get("waves")
    if not isinstance(waves, list) or not all(isinstance(w, dict) for w in waves):
        raise InputError("must be a list of wave objects", field="waves")
    return waves


def read_wave(data: dict[str, Any], w: int, workload: Workload) -> WaveArrays:
    """Wave ``w`` of a plan dictionary as checked arrays: a well-formed segment tree, every request of
    the workload and its chain within the tree, every segment on some chain, and every packed token
    owned by exactly one of the plan's CP ranks."""
    wave = data["waves"][w]
    where = f"waves[{w}]"
    seg_parent, seg_position, seg_length = _segments(wave, where)
    num_segments = seg_length.size
    item_ptr = np.cumsum([0, *(len(item.requests) for item in workload.items)])
    request_ids, chains = _chains(wave, where, workload, item_ptr, num_segments)
    request_ptr = np.cumsum([0, *(c.size for c in chains)]).astype(np.int64)
    request_segments = np.concatenate(chains)
    seg_src = _segment_sources(request_ids, request_ptr, request_segments, num_segments, where)
    num_ranks = _wave_cp(wave, data, where)
    token_owner = _owners_from_ranges(wave.get("ranks"), num_ranks, int(seg_length.sum()), where)
    chunk_tokens = data.get("chunk_tokens", CHUNK_TOKENS)
    return WaveArrays(
        num_ranks=num_ranks,
        chunk_tokens=int(chunk_tokens) if isinstance(chunk_tokens, int) else CHUNK_TOKENS,
        request_ids=request_ids,
        seg_parent=seg_parent,
        seg_position=seg_position,
        seg_length=seg_length,
        seg_offset=np.cumsum(np.r_[0, seg_length[:-1]]).astype(np.int64),
        seg_src=seg_src,
        request_ptr=request_ptr,
        request_segments=request_segments,
        token_owner=token_owner,
    )


def wave_gdn_handoff(data: dict[str, Any], w: int) -> str:
    """How wave ``w``'s GDN states cross CP ranks: its ``gdn_handoff`` (``"rounds"`` where a plan written
    before the field leaves it out)."""
    mode = data["waves"][w].get("gdn_handoff", ROUNDS)
    if mode not in GDN_HANDOFF_MODES:
        raise InputError(
            f"must be one of {', '.join(map(repr, GDN_HANDOFF_MODES))}, got {mode!r}",
            field=f"waves[{w}].gdn_handoff",
        )
    return mode


def _segments(wave: dict[str, Any], where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parents, positions and lengths of the wave's ``[parent, position, length]`` segments."""
    segments = _int_array(wave.get("segments"), f"{where}.segments", width=3)
    seg_parent, seg_position, seg_length = segments.T.copy()
    if (seg_length < 1).any() or (seg_position < 0).any():
        raise InputError("a segment has a negative position or no tokens", field=f"{where}.segments")
    if ((seg_parent < -1) | (seg_parent >= np.arange(segments.shape[0]))).any():
        raise InputError("a segment's parent must be -1 or an earlier segment", field=f"{where}.segments")
    return seg_parent, seg_position, seg_length


def _chains(
    wave: dict[str, Any], where: str, workload: Workload, item_ptr: np.ndarray, num_segments: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each request's flattened workload index and its chain of segments."""
    requests = wave.get("requests")
    if not isinstance(requests, list) or not requests:
        raise InputError("must be a non-empty list", field=f"{where}.requests")
    request_ids, chains = [], []
    for k, entry in enumerate(requests):
        at = f"{where}.requests[{k}]"
        if not isinstance(entry, dict):
            raise InputError("must be an object with item, request and segments", field=at)
        item_id = entry.get("item")
        item = workload.index_of.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise InputError(f"item {item_id!r} is not in the workload", field=f"{at}.item")
        index = entry.get("request")
        valid_index = isinstance(index, int) and not isinstance(index, bool)
        if not valid_index or not 0 <= index < len(workload.items[item].requests):
            raise InputError(f"no request {index!r} in item {entry['item']!r}", field=f"{at}.request")
        chain = _int_array(entry.get("segments"), f"{at}.segments")
        if chain.size == 0 or (chain < 0).any() or (chain >= num_segments).any():
            raise InputError(f"must list segments in [0, {num_segments})", field=f"{at}.segments")
        request_ids.append(int(item_ptr[item]) + index)
        chains.append(chain)
    return np.array(request_ids, dtype=np.int64), chains


def _segment_sources(
    request_ids: np.ndarray,
    request_ptr: np.ndarray,
    request_segments: np.ndarray,
    num_segments: int,
    where: str,
) -> np.ndarray:
    """The request each segment's tokens are read from (the first whose chain holds it); every segment
    must be on some chain."""
    used, first = np.unique(request_segments, return_index=True)
    if used.size != num_segments:
        missing = int(np.setdiff1d(np.arange(num_segments), used)[0])
        raise InputError(f"segment {missing} is in no request's chain", field=f"{where}.segments")
    return request_ids[np.searchsorted(request_ptr, first, side="right") - 1]


def _int_array(value: Any, field: str, *, width: int | None = None) -> np.ndarray:
    """A list (of ``width``-lists) of integers as an int64 array, or an InputError naming ``field``."""
    try:
        array = np.array(value, dtype=np.int64)
        ok = isinstance(value, list) and array.ndim == (1 if width is None else 2)
        ok = ok and (width is None or array.shape[1] == width)
        if isinstance(value, list) and not value:
            array, ok = np.zeros((0, width) if width else 0, dtype=np.int64), True
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        shape = "a list of integers" if width is None else f"a list of [{', '.join(['int'] * width)}]"
        raise InputError(f"must be {shape}", field=field)
    return array


def _plan_cp(data: dict[str, Any]) -> int:
    """The plan's CP size, from its ``topology``."""
    topology = data.get("topology")
    cp = topology.get("cp") if isinstance(topology, dict) else None
    if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
        raise InputError("must give a positive integer cp", field="topology.cp")
    return cp


def _wave_cp(wave: dict[str, Any], data: dict[str, Any], where: str) -> int:
    """The wave's CP group size: its ``cp`` (dynamic-CP plans), else the plan's (which must be valid
    either way)."""
    plan_cp = _plan_cp(data)
    if "cp" not in wave:
        return plan_cp
    cp = wave["cp"]
    if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
        raise InputError("must be a positive integer group size", field=f"{where}.cp")
    return cp


def _owners_from_ranges(ranks: Any, num_ranks: int, packed_tokens: int, where: str) -> np.ndarray:
    """Every packed token's rank from the ranks' owned ``ranges``; each token owned exactly once."""
    if not isinstance(ranks, list) or len(ranks) != num_ranks:
        raise InputError(f"must list the {num_ranks} CP ranks", field=f"{where}.ranks")
    owner = np.full(packed_tokens, -1, dtype=np.int64)
    cover = np.zeros(packed_tokens + 1, dtype=np.int64)
    for r, entry in enumerate(ranks):
        at = f"{where}.ranks[{r}].ranges"
        ranges = _int_array(entry.get("ranges") if isinstance(entry, dict) else None, at, width=2)
        lo, hi = ranges.T if ranges.size else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if ((lo < 0) | (hi > packed_tokens) | (lo >= hi)).any():
            raise InputError(f"ranges must be [start, end) within [0, {packed_tokens}]", field=at)
        np.add.at(cover, lo, 1)
        np.add.at(cover, hi, -1)
        mark = np.zeros(packed_tokens + 1, dtype=np.int64)
        np.add.at(mark, lo, 1)
        np.add.at(mark, hi, -1)
        owner[np.cumsum(mark)[:-1] > 0] = r
    count = np.cumsum(cover)[:-1]
    bad = np.flatnonzero(count != 1)
    if bad.size:
        token = int(bad[0])
        how = "no rank" if count[token] == 0 else f"{int(count[token])} ranks"
        raise InputError(f"packed token {token} is owned by {how}", field=f"{where}.ranks")
    return owner


def check_plan_workload(data: dict[str, Any], workload: Workload, *, part: bool) -> None:
    """Refuse a workload the plan was not made for, in one message: a request the plan holds that the
    workload lacks, an item of the workload the plan leaves out (unless the plan is ``part`` of a
    larger one, as a pack shard is), or requests whose digests (token ids, flags) differ. Plans without
    digests (older files) are checked by ids only."""
    keys = _plan_keys(data)
    if keys is None:
        return
    where = workload.source or "the workload"
    held = {key for wave_keys in keys for key in wave_keys}
    for w, wave_keys in enumerate(keys):
        for item_id, k in wave_keys:
            index = workload.index_of.get(item_id)
            if index is None or not 0 <= k < len(workload.items[index].requests):
                _another(f"its wave {w} holds request {k} of item {item_id!r}, which {where} does not have")
    if not part:
        left = [(i.id, k) for i in workload.items for k in range(len(i.requests)) if (i.id, k) not in held]
        if left:
            _another(
                f"{where} has {len(left)} request(s) the plan does not hold (first: request {left[0][1]} of "
                f"item {left[0][0]!r})"
            )
    summary = data.get("workload")
    digests = summary.get("wave_sha256") if isinstance(summary, dict) else None
    if not isinstance(digests, list) or len(digests) != len(keys):
        return
    for w, (wave_keys, digest) in enumerate(zip(keys, digests, strict=True)):
        if wave_digest(workload, wave_keys) != digest:
            items = sorted({item_id for item_id, _ in wave_keys})
            shown = ", ".join(repr(i) for i in items[:3]) + (", ..." if len(items) > 3 else "")
            _another(f"the requests of its wave {w} (items {shown}) have other token ids or flags in {where}")


def _another(reason: str) -> None:
    raise InputError(f"this plan was made for another workload: {reason}", field="workload")


def _plan_keys(data: dict[str, Any]) -> list[list[tuple[str, int]]] | None:
    """Each wave's (item id, request index) keys, or ``None`` when the waves are too malformed to say
    (the verifier then reports what is wrong)."""
    try:
        keys = [[(r["item"], r["request"]) for r in wave["requests"]] for wave in data["waves"]]
    except (KeyError, TypeError):
        return None
    valid = all(isinstance(i, str) and type(k) is int for wave in keys for i, k in wave)
    return keys if valid else None

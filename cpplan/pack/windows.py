"""Planning one window of records: parse (and tokenize), reject what cannot be planned, plan the rest.

:func:`plan_window` is a pure function of its job and context, so every engine (in process, a process
pool, Ray tasks) produces the same bytes for the same window.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cpplan.errors import InputError, NoFitError
from cpplan.pack.conversations import conversation_item, load_tokenizer
from cpplan.pack.readers import Cursor, Format, Record
from cpplan.planners.greedy import greedy_plan
from cpplan.planners.portfolio import solve
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import strip_timing, wave_plan_dict
from cpplan.pricing.problem import Problem, check_context
from cpplan.pricing.wave import local_tokens
from cpplan.spec.card import ResolvedCard
from cpplan.spec.items import check_vocabulary
from cpplan.spec.profile import SolverProfile
from cpplan.spec.records import DEFAULT_FIELDS, HF_TOKENS, RecordFields, item_from_record, parse_item_line
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Workload

BASELINE_LAYOUTS = ("none",)


@dataclass(frozen=True, kw_only=True, eq=False)
class PackContext:
    """What every window needs besides its records: the source, the problem's settings, the profile."""

    source: str
    fmt: Format
    settings: Settings
    profile: SolverProfile
    tokenizer: str | None = None
    fields: RecordFields = DEFAULT_FIELDS

    @property
    def card(self) -> ResolvedCard:
        """The card resolved for the settings (once per process: the settings keep it, unpickled)."""
        return self.settings.card


@dataclass(frozen=True, kw_only=True)
class WindowJob:
    """One window: its index, the input cursor before it and its records, in input order."""

    index: int
    start: Cursor
    records: tuple[Record, ...]

    @property
    def end(self) -> Cursor:
        """The input cursor just past the window."""
        return self.records[-1].end


@dataclass(frozen=True, kw_only=True)
class WindowResult:
    """A planned window: the shard text (one wave a line), the reject lines, and its figures."""

    index: int
    shard: str
    rejects: str
    stats: dict[str, Any]
    end: Cursor


def parse_record(
    record: Record, fmt: Format, source: str, tokenizer: str | None, fields: RecordFields = DEFAULT_FIELDS
) -> Item:
    """One input record to an item: a JSONL line or Parquet row in any workload form, or an element of
    a JSON array (a ShareGPT conversation, tokenized with ``tokenizer``, or an item record)."""
    if record.error is not None:
        raise InputError(record.error, file=source, line=record.line)
    if fmt == "jsonl":
        return parse_item_line(record.payload, source, record.line, fields)
    data = record.payload
    if fmt == "parquet":
        data = dict(data)
        if isinstance(data.get("requests"), list):
            data["requests"] = [
                {k: v for k, v in r.items() if v is not None} if isinstance(r, dict) else r
                for r in data["requests"]
            ]
        return item_from_record(data, source, record.line, fields)
    if isinstance(data, dict) and "conversations" not in data and _is_item_record(data, fields):
        return item_from_record(data, source, record.line, fields)
    return conversation_item(data, load_tokenizer(tokenizer), source, record.line)


def _is_item_record(data: dict[str, Any], fields: RecordFields) -> bool:
    return bool({"tokens", "requests", HF_TOKENS, fields.tokens} & set(data))


def _parse(record: Record, ctx: PackContext) -> Item:
    return parse_record(record, ctx.fmt, ctx.source, ctx.tokenizer, ctx.fields)


def _known_id(record: Record, fields: RecordFields) -> str | None:
    """The id of a record that did not parse, as the item would have had it (a string, or an integer
    written in decimal); ``None`` when the record has no readable id."""
    payload = record.payload
    if isinstance(payload, str):  # a JSONL line
        try:
            payload = json.loads(payload)
        except (ValueError, RecursionError):
            return None
    item_id = payload.get(fields.id) if isinstance(payload, dict) else None
    if isinstance(item_id, int | np.integer) and not isinstance(item_id, bool):
        return str(int(item_id))
    return item_id if isinstance(item_id, str) and item_id else None


def _reject(record: Record, item_id: str | None, kind: str, reason: str) -> dict[str, Any]:
    return {"line": record.line, "record": record.ordinal, "id": item_id, "kind": kind, "reason": reason}


def _build(items: Sequence[Item], ctx: PackContext) -> Problem:
    return Problem.build(Workload(items=tuple(items), source=ctx.source), ctx.settings)


def _plan(
    items: list[Item], records: list[Record], ctx: PackContext, rejects: list[dict[str, Any]]
) -> tuple[Problem, Plan] | None:
    """Plan ``items``; an item the planner refuses is rejected and the rest planned again."""
    while items:
        try:
            problem = _build(items, ctx)
            return problem, solve(problem, ctx.profile).plan
        except NoFitError as exc:
            ids = [item.id for item in items]
            k = ids.index(exc.item) if exc.item in ids else _first_unplannable(items, ctx)
            if k is None:
                raise
            reason = str(exc) if exc.item in ids else _single_refusal(items[k], ctx)
        except InputError as exc:  # the window as a whole is invalid
            rejects.extend(_reject(r, i.id, "input", str(exc)) for r, i in zip(records, items, strict=True))
            return None
        rejects.append(_reject(records[k], items[k].id, "no_fit", reason))
        del items[k], records[k]
    return None


def _single_refusal(item: Item, ctx: PackContext) -> str:
    try:
        solve(_build([item], ctx), ctx.profile)
    except (NoFitError, InputError) as exc:
        return str(exc)
    return ""


def _first_unplannable(items: Sequence[Item], ctx: PackContext) -> int | None:
    """When the portfolio fails without naming an item: the first item that cannot be planned alone."""
    return next((k for k, item in enumerate(items) if _single_refusal(item, ctx)), None)


def _baseline(problem: Problem, ctx: PackContext) -> tuple[Plan | None, int]:
    """The no-sharing greedy plan of the planned items, and how many items it could not place."""
    items = list(problem.workload.items)
    unplaced = 0
    while True:
        try:
            return greedy_plan(problem, BASELINE_LAYOUTS, strategy="baseline"), unplaced
        except NoFitError as exc:
            if exc.item not in {item.id for item in items}:
                return None, len(items) + unplaced
            items = [item for item in items if item.id != exc.item]
            unplaced += 1
            if not items:
                return None, unplaced
            problem = _build(items, ctx)


def plan_figures(plan: Plan | None) -> dict[str, Any]:
    """Additive figures of a plan: waves, tokens, seconds, and the sums behind the rank imbalance."""
    if plan is None:
        return {
            "waves": 0,
            "logical_tokens": 0,
            "packed_tokens": 0,
            "cost_s": 0.0,
            "max_local_tokens": 0,
            "mean_local_tokens": 0.0,
        }
    maxima, means = 0, 0.0
    for wave in plan.waves:
        tokens = local_tokens(wave)
        maxima += int(tokens.max())
        means += float(tokens.mean())
    return {
        "waves": plan.num_waves,
        "logical_tokens": plan.logical_tokens,
        "packed_tokens": plan.packed_tokens,
        "cost_s": plan.cost_s,
        "max_local_tokens": maxima,
        "mean_local_tokens": means,
    }


def plan_window(job: WindowJob, ctx: PackContext) -> WindowResult:
    """Parse, check and plan one window; every record ends in the shard or in the reject lines."""
    items, records, rejects = _read_window(job, ctx)
    planned = _plan(items, records, ctx, rejects)
    rejects.sort(key=lambda r: r["record"])
    lines, figures = _shard(job, ctx, planned)
    num_rejected = len(rejects)
    num_planned = 0 if planned is None else len({i for wave in planned[1].waves for i in wave.items})
    assert num_planned + num_rejected == len(job.records), (num_planned, num_rejected, len(job.records))
    stats = {
        "index": job.index,
        "first_line": job.records[0].line,
        "last_line": job.records[-1].line,
        "items_in": len(job.records),
        "items_planned": num_planned,
        "items_rejected": num_rejected,
        **figures,
    }
    return WindowResult(
        index=job.index,
        shard="".join(line + "\n" for line in lines),
        rejects="".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rejects),
        stats=stats,
        end=job.end,
    )


def _read_window(job: WindowJob, ctx: PackContext) -> tuple[list[Item], list[Record], list[dict[str, Any]]]:
    """The window's items that can be planned (with their records, in input order) and the reject lines
    of the rest: records that do not parse, requests beyond the model's context, repeated ids."""
    card = ctx.card
    items: list[Item] = []
    records: list[Record] = []
    rejects: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for record in job.records:
        try:
            item = _parse(record, ctx)
        except InputError as exc:
            rejects.append(_reject(record, _known_id(record, ctx.fields), "input", str(exc)))
            continue
        try:
            check_context(item, card.max_context, source=ctx.source, line=record.line)
            check_vocabulary(item, ctx.settings.model.geometry.vocab, source=ctx.source, line=record.line)
        except InputError as exc:
            rejects.append(_reject(record, item.id, "input", str(exc)))
            continue
        if item.id in seen:
            why = f"duplicate item id {item.id!r} (first on line {seen[item.id]})"
            rejects.append(_reject(record, item.id, "input", why))
            continue
        seen[item.id] = record.line
        items.append(item)
        records.append(record)
    return items, records, rejects


def _shard(
    job: WindowJob, ctx: PackContext, planned: tuple[Problem, Plan] | None
) -> tuple[list[str], dict[str, Any]]:
    """The shard's lines (one wave a line) and the window's figures: requests, the plan's additive
    figures, its peak, and the no-sharing baseline's figures with the items it could not place."""
    if planned is None:
        empty = plan_figures(None)
        return [], {"requests": 0, **empty, "peak_bytes": 0, "baseline": {**empty, "items_unplaced": 0}}
    problem, plan = planned
    baseline, unplaced = _baseline(problem, ctx)
    lines = [
        _shard_line(problem, plan, i, _position(job, ctx, i, plan.num_waves)) for i in range(plan.num_waves)
    ]
    figures = {
        "requests": problem.workload.num_requests,
        **plan_figures(plan),
        "peak_bytes": plan.peak_bytes,
        "baseline": {**plan_figures(baseline), "items_unplaced": unplaced},
    }
    return lines, figures


def _position(job: WindowJob, ctx: PackContext, wave: int, num_waves: int) -> dict[str, Any]:
    """A shard line's ``pack`` object: where its wave and its window's records are, and how the records
    are read (so the line can be checked against the dataset on its own)."""
    return {
        "window": job.index,
        "wave": wave,
        "waves": num_waves,
        "format": ctx.fmt,
        "tokenizer": ctx.tokenizer,
        "fields": ctx.fields.to_dict(),
        "start": job.start.to_dict(),
        "end": job.end.to_dict(),
        "first_line": job.records[0].line,
        "last_line": job.records[-1].line,
    }


def _shard_line(problem: Problem, plan: Plan, index: int, position: dict[str, Any]) -> str:
    """One shard line: wave ``index`` as a plan of its own (readable by ``materialize`` and ``cpplan
    verify``), its ``pack`` position before the wave and its place in the window's schedule (``gpus``,
    ``start_s``; see :func:`~cpplan.plans.plan_reader.rank_waves`)."""
    data = strip_timing(wave_plan_dict(problem, plan, index, {"pack": position}))
    return json.dumps(data, separators=(",", ":"), allow_nan=False)

"""ART's packer (``art.preprocessing.pack.packed_tensors_from_tokenized_results``, openpipe-art 0.5.18)
with rows sized by cpplan's per-rank memory floors and taken from cpplan's plan.

ART fills rows of ``seq_len`` tokens first-fit, writes a completion under its prompt only when that
prompt already is in the current row, and shuffles the rows. Here every ART prompt group (the results
of one ``prompt_id``) is one cpplan item whose requests share the group's first ``prompt_length``
tokens and nothing else (ART's ids express one level of sharing), and:

- the row width is the most tokens one row holds on the busiest CP rank under the card's floors
  (:func:`row_width`; at CP > 1 what a rank admits, not a global token count), a multiple of
  ``row_multiple``;
- the planner plans the step under the budget at which rows of that width fit
  (:func:`budget_for_width`), each wave one row: the shared prompt written once, each result's own
  tokens after it; ART's own first-fit at the same width is the other candidate, and of the two the
  one whose padded rows price cheaper is kept (``rows_from`` forces one);
- every row, padded to the common width as ART runs it, is priced within the budget on every rank
  (:func:`cpplan.integrations.art.art_pricing.price_rows`), else narrower widths are bisected.

The ids keep ART's conventions, so ART's attention rule (causal and (same group or the query's parent
group is the key's group)) is the rows' tree mask: prompt tokens carry the prompt's id (a second copy
in one row, where the plan did not share it, a fresh id), each result's own tokens a group id of their
own, every token of a result its prompt copy's id as parent; padding is ``-1``, ``input_pos`` 0,
log-probs NaN, advantages and weights 0. The weights and advantages are normalized over the whole packed
batch exactly as ART does it (the same operations, in torch's default dtype). Row order is the plan's;
``shuffle`` permutes the rows with a seeded generator.

ART's tokenized results are read through these fields only (duck-typed: nothing here imports ART):
``token_ids``, ``input_pos``, ``assistant_mask``, ``logprobs``, ``advantage``, ``weight``,
``prompt_id``, ``prompt_length``, ``pixel_values``, ``image_grid_thw``.
"""

from __future__ import annotations

import functools
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cpplan.baselines.capacity import card_token_capacity
from cpplan.errors import InputError, NoFitError
from cpplan.integrations.art.art_pricing import RowPrices, price_rows
from cpplan.plans.result import PlanResult
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.config_card import card_from_config
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item, Request, Workload

logger = logging.getLogger(__name__)

PACKED_KEYS = (
    "tokens",
    "group_ids",
    "parent_ids",
    "input_pos",
    "assistant_mask",
    "logprobs",
    "advantages",
    "weights",
    "pixel_values",
    "image_grid_thw",
)
"""The keys of ART's ``PackedTensors``, in ART's order."""

MAX_REPLANS = 8
"""Narrower row widths tried (bisected), at most, when the rows of the widest do not fit padded."""


@dataclass(frozen=True, kw_only=True)
class ArtResult:
    """One kept tokenized result (cut to ``seq_len`` tokens where ART cuts it): its position
    ``index`` in the input list and the fields ART packs."""

    index: int
    prompt_id: int
    prompt_length: int
    token_ids: tuple[int, ...]
    input_pos: tuple[int, ...]
    assistant_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    advantage: float
    weight: float

    @property
    def num_tokens(self) -> int:
        """Tokens of the (possibly cut) result."""
        return len(self.token_ids)


@dataclass(frozen=True, kw_only=True)
class ArtPacking:
    """What :func:`pack_results_with_plan` made: ART's ``tensors``; the ``results`` it kept; the cpplan
    ``workload`` of them and the last plan ``result`` made (``None`` with ``pack_results=False`` or when
    no plan was made under the final budget); per row the kept results it holds (``row_results``,
    indices into ``results``, in row order); ``left_out``, the input positions of results not packed,
    each with the reason; the rows' ``prices`` as ART runs them (every padded row within the budget);
    ``planned_memory_bytes``, the budget the plan was made under (the one at which rows of the chosen
    width fit); ``strategy``: ``plan`` (the rows are the plan's waves), ``first_fit`` (ART's first-fit at
    the floors' width priced cheaper, so its rows were kept) or ``unpacked``."""

    tensors: dict[str, Any]
    results: tuple[ArtResult, ...]
    workload: Workload | None
    result: PlanResult | None
    row_results: tuple[tuple[int, ...], ...]
    left_out: tuple[tuple[int, str], ...]
    prices: RowPrices | None
    planned_memory_bytes: int | None
    strategy: str

    @property
    def num_rows(self) -> int:
        """Rows of the packed tensors."""
        return int(self.tensors["tokens"].shape[0])

    @property
    def row_tokens(self) -> int:
        """Columns of the packed tensors (every row's length, padding included)."""
        return int(self.tensors["tokens"].shape[1])

    @property
    def padded_tokens(self) -> int:
        """Positions of the packed tensors, padding included (rows times columns)."""
        return self.num_rows * self.row_tokens

    @property
    def real_tokens(self) -> int:
        """Positions holding a token (not padding)."""
        return int((self.tensors["group_ids"] != -1).sum())


def packed_tensors_from_tokenized_results(
    tokenized_results: Sequence[Any],
    seq_len: int,
    pad_token_id: int = -100,
    truncate_long_results: bool = True,
    advantage_balance: float = 0.0,
    verbosity: int = 1,
    pack_results: bool = True,
    *,
    memory_bytes: int | str | None = None,
    card: str | Path | None = None,
    config: Any = None,
    dtype_bytes: int | None = None,
    topology: Topology | str | None = None,
    solver: str = "deterministic",
    planner: Any = None,
    shuffle: bool = False,
    seed: int = 0,
    row_multiple: int | None = None,
    rows_from: str = "cheaper",
) -> dict[str, Any]:
    """ART's packer, same positional arguments and return (a ``PackedTensors`` dictionary), its rows
    cpplan's plan (see the module docstring). The cpplan settings, keyword-only: a ready ``planner``
    (a :class:`cpplan.Planner`), or ``memory_bytes`` (per CP rank, for one row) with a model ``card``
    (a shipped name or a path) or the model's transformers ``config`` (a card derived from it,
    :func:`cpplan.spec.config_card.card_from_config`; ``dtype_bytes`` its element size), ``topology``
    (default one rank; ``cp`` > 1 sizes each row by the busiest rank's floors) and ``solver`` (default
    ``deterministic``: the same results give the same rows). ``shuffle`` permutes the rows with
    ``random.Random(seed)``. Every row is padded to the longest, rounded up to a multiple of
    ``row_multiple`` (default ``min(seq_len, 1024)``: ART's Unsloth trainer wants a multiple of its
    1,024-token log-prob chunk). ``rows_from`` (:func:`pack_results_with_plan`) picks the rows.

    ``seq_len`` keeps ART's per-result meaning: a longer result is skipped, or with
    ``truncate_long_results`` cut to its first ``seq_len`` tokens; it no longer caps a row, which holds
    what the floors admit. ``pad_token_id``, ``advantage_balance`` and ``pack_results`` (``False``: one
    result a row, its prompt written in it) are ART's. Results ART skips (too long without truncation,
    no assistant token after the prompt) and results whose first ``seq_len`` tokens hold no assistant
    token (ART writes a row without loss for each) are left out with a warning. Vision inputs, results
    with mismatched field lengths, a group whose results disagree on the shared prompt and an assistant
    token inside the shared prompt are refused with a ``ValueError`` naming the result."""
    return pack_results_with_plan(
        tokenized_results,
        seq_len,
        pad_token_id=pad_token_id,
        truncate_long_results=truncate_long_results,
        advantage_balance=advantage_balance,
        verbosity=verbosity,
        pack_results=pack_results,
        planner=planner
        if planner is not None or not pack_results
        else make_planner(
            memory_bytes=memory_bytes,
            card=card,
            config=config,
            dtype_bytes=dtype_bytes,
            topology=topology,
            solver=solver,
        ),
        shuffle=shuffle,
        seed=seed,
        row_multiple=row_multiple,
        rows_from=rows_from,
    ).tensors


def packer(**settings: Any) -> Callable[..., dict[str, Any]]:
    """:func:`packed_tensors_from_tokenized_results` with the cpplan keyword settings bound, its
    planner made once: a function of ART's own signature, to put where ART calls its packer
    (``art.local.backend.packed_tensors_from_tokenized_results = packer(config=..., memory_bytes=...)``)."""
    planner_keys = {"memory_bytes", "card", "config", "dtype_bytes", "topology", "solver"}
    if "planner" not in settings:
        made = make_planner(**{k: v for k, v in settings.items() if k in planner_keys})
        settings = {k: v for k, v in settings.items() if k not in planner_keys} | {"planner": made}
    bound = functools.partial(packed_tensors_from_tokenized_results, **settings)
    return functools.update_wrapper(bound, packed_tensors_from_tokenized_results)


def make_planner(
    *,
    memory_bytes: int | str | None,
    card: str | Path | None = None,
    config: Any = None,
    dtype_bytes: int | None = None,
    topology: Topology | str | None = None,
    solver: str = "deterministic",
) -> Any:
    """The :class:`cpplan.Planner` of the ART packer's settings (a ``card``, else one derived from
    ``config``). Refuses a topology with data or pipeline parallelism or dynamic CP (ART packs one
    trainer's rows)."""
    from cpplan.planner import Planner

    if memory_bytes is None:
        raise InputError(
            "the cpplan ART packer sizes rows by memory: give memory_bytes", field="memory_bytes"
        )
    if (card is None) == (config is None):
        raise InputError("give the model's card or its transformers config (one of them)", field="card")
    model = card if card is not None else card_from_config(config, dtype_bytes=dtype_bytes)
    made = Planner(model=model, topology=topology, memory_bytes=memory_bytes, solver=solver)
    top = made.settings.topology
    if top.dp != 1 or top.pp != 1 or top.dynamic_cp:
        raise InputError(
            f"ART packs one trainer's rows: dp and pp must be 1 and dynamic CP off (got {top})",
            field="topology",
        )
    return made


def pack_results_with_plan(
    tokenized_results: Sequence[Any],
    seq_len: int,
    *,
    planner: Any,
    pad_token_id: int = -100,
    truncate_long_results: bool = True,
    advantage_balance: float = 0.0,
    verbosity: int = 1,
    pack_results: bool = True,
    shuffle: bool = False,
    seed: int = 0,
    row_multiple: int | None = None,
    rows_from: str = "cheaper",
) -> ArtPacking:
    """:func:`packed_tensors_from_tokenized_results` with everything it made: the
    :class:`ArtPacking` (its plan, workload and rows) around the tensors. ``planner`` is used only
    when ``pack_results``. ``rows_from``: ``cheaper`` (default: of the plan's rows and ART's first-fit
    at the same floor-sized width, the one whose padded rows price cheaper), ``plan`` or
    ``first_fit`` (that one only)."""
    layout = _RowLayout(
        multiple=_row_multiple(rows_from, seq_len, row_multiple),
        pad_token_id=pad_token_id,
        advantage_balance=advantage_balance,
        shuffle=shuffle,
        seed=seed,
    )
    results, left_out = _results_to_pack(tokenized_results, seq_len, truncate_long_results, verbosity)
    if not pack_results:
        rows = [unpacked_row(results[k], k) for k in range(len(results))]
        tensors, order = layout.tensors(rows, results)
        unpacked = _Candidate(rows=rows, tensors=tensors, order=order, strategy="unpacked")
        return unpacked.packing(results, None, left_out)
    workload, members = results_workload(results)
    settings = planner.settings
    longest = layout.multiple * math.ceil(max(r.num_tokens for r in results) / layout.multiple)
    widths = list(range(longest, max(longest, row_width(settings, layout.multiple)) + 1, layout.multiple))
    rows_of = _RowSources(
        planner=planner,
        workload=workload,
        members=members,
        results=results,
        layout=layout,
        rows_from=rows_from,
    )
    found = _widest_fitting(widths, rows_of.attempt)
    if found is None:
        raise NoFitError(
            f"no plan's rows, padded to one width of {widths[0]} to {widths[-1]} tokens, fit the budget of "
            f"{settings.memory_bytes:,} bytes per rank at cp={settings.topology.cp}; give more memory or a "
            "smaller seq_len",
            memory_bytes=settings.memory_bytes,
        )
    return found.packing(results, workload, left_out)


def _row_multiple(rows_from: str, seq_len: Any, row_multiple: Any) -> int:
    """The checked arguments' row multiple: ``row_multiple``, by default ``min(seq_len, 1024)``."""
    if rows_from not in ("cheaper", "plan", "first_fit"):
        raise InputError(f"must be cheaper, plan or first_fit, got {rows_from!r}", field="rows_from")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise InputError(f"must be a positive integer, got {seq_len!r}", field="seq_len")
    multiple = min(seq_len, 1024) if row_multiple is None else row_multiple
    if not isinstance(multiple, int) or multiple < 1:
        raise InputError(f"must be a positive integer, got {row_multiple!r}", field="row_multiple")
    return multiple


def _results_to_pack(
    tokenized_results: Sequence[Any], seq_len: int, truncate_long_results: bool, verbosity: int
) -> tuple[list[ArtResult], list[tuple[int, str]]]:
    """:func:`kept_results`, each result left out logged (and printed above verbosity 1); refused when
    none is left."""
    results, left_out = kept_results(tokenized_results, seq_len, truncate_long_results=truncate_long_results)
    for index, reason in left_out:
        logger.warning("ART packer: tokenized result %d left out: %s", index, reason)
        if verbosity > 1:
            print(f"Result {index} left out: {reason}")
    if not results:
        raise InputError("no tokenized result has an assistant token to train on", field="tokenized_results")
    return results, left_out


@dataclass(frozen=True, kw_only=True)
class _RowLayout:
    """How rows become tensors: padded to a multiple of ``multiple``, with ART's pad id and advantage
    balance, in plan order or shuffled by ``seed``."""

    multiple: int
    pad_token_id: int
    advantage_balance: float
    shuffle: bool
    seed: int

    def tensors(self, rows: list[Row], results: Sequence[ArtResult]) -> tuple[dict[str, Any], list[int]]:
        """The tensors of ``rows`` (in plan order, or permuted by ``random.Random(seed)``) padded to the
        longest rounded up to ``multiple``, and the row order."""
        order = list(range(len(rows)))
        if self.shuffle:
            random.Random(self.seed).shuffle(order)
        width = self.multiple * math.ceil(max(row.num_tokens for row in rows) / self.multiple)
        tensors = row_tensors(
            [rows[i] for i in order],
            width,
            results,
            pad_token_id=self.pad_token_id,
            advantage_balance=self.advantage_balance,
        )
        return tensors, order


@dataclass(frozen=True, kw_only=True)
class _Candidate:
    """One packing's rows, their tensors and row order, and (packed) the plan, the padded rows' prices,
    the budget it was planned under and where its rows came from."""

    rows: list[Row]
    tensors: dict[str, Any]
    order: list[int]
    strategy: str
    result: PlanResult | None = None
    prices: RowPrices | None = None
    budget: int | None = None

    def packing(
        self, results: list[ArtResult], workload: Workload | None, left_out: list[tuple[int, str]]
    ) -> ArtPacking:
        """The :class:`ArtPacking` of these rows."""
        return ArtPacking(
            tensors=self.tensors,
            results=tuple(results),
            workload=workload,
            result=self.result,
            row_results=tuple(self.rows[i].members for i in self.order),
            left_out=tuple(left_out),
            prices=self.prices,
            planned_memory_bytes=self.budget,
            strategy=self.strategy,
        )


@dataclass(frozen=True, kw_only=True)
class _RowSources:
    """Where rows of a given width come from: the planner's plan under the budget that admits them, and
    ART's first-fit (``rows_from`` says which are tried)."""

    planner: Any
    workload: Workload
    members: dict[str, list[int]]
    results: list[ArtResult]
    layout: _RowLayout
    rows_from: str

    def attempt(self, width: int) -> _Candidate | None:
        """The cheaper (padded, as ART runs them) of two packings whose rows hold ``width`` tokens and
        fit: the plan under the budget that admits such rows, and ART's first-fit at ``width``; ``None``
        when neither fits."""
        settings = self.planner.settings
        budget = budget_for_width(settings, width)
        result = None if self.rows_from == "first_fit" else self._plan(budget)
        found = None if result is None else self._plan_rows(result, width, budget)
        if self.rows_from == "plan":
            return found
        rows = first_fit_rows(self.results, width)
        tensors, order = self.layout.tensors(rows, self.results)
        prices = price_rows(tensors, settings)
        if not prices.overshoot_bytes and (found is None or prices.step_s < found.prices.step_s):
            found = _Candidate(
                rows=rows,
                tensors=tensors,
                order=order,
                strategy="first_fit",
                result=result,
                prices=prices,
                budget=budget,
            )
        return found

    def _plan(self, budget: int) -> PlanResult | None:
        """The planner's plan under ``budget``; ``None`` where it refuses."""
        settings = self.planner.settings
        try:
            current = self.planner if budget == settings.memory_bytes else _planner_at(self.planner, budget)
            return current.plan(self.workload)
        except (InputError, NoFitError):  # a budget below the static floor, or one no item fits
            return None

    def _plan_rows(self, result: PlanResult, width: int, budget: int) -> _Candidate | None:
        """The plan's rows when no wave is wider than ``width`` and the padded rows fit; else ``None``."""
        if max(wave.packed_tokens for wave in result.plan.waves) > width:
            return None
        rows = plan_rows(result, self.workload, self.members, self.results)
        tensors, order = self.layout.tensors(rows, self.results)
        prices = price_rows(tensors, self.planner.settings)
        if prices.overshoot_bytes:
            return None
        return _Candidate(
            rows=rows,
            tensors=tensors,
            order=order,
            strategy="plan",
            result=result,
            prices=prices,
            budget=budget,
        )


def _widest_fitting(widths: list[int], attempt: Callable[[int], _Candidate | None]) -> _Candidate | None:
    """The widest row width's packing when it fits; else, bisecting the widths (at most
    :data:`MAX_REPLANS` tries) for the widest whose padded rows fit, the cheapest packing found."""
    found = attempt(widths[-1])
    low, high = -1, len(widths) - 1
    for _ in range(0 if found else MAX_REPLANS):
        if high - low <= 1:
            break
        middle = (low + high) // 2
        probe = attempt(widths[middle])
        if probe is None:
            high = middle
        else:  # wider rows fit: look wider, keeping the cheapest rows found
            low = middle
            if found is None or probe.prices.step_s < found.prices.step_s:
                found = probe
    return found


def row_width(settings: Any, multiple: int) -> int:
    """The widest row, a multiple of ``multiple``: the most tokens one row (one segment, logits at every
    position) holds within the budget on the busiest of ``settings``'s CP ranks, rounded down."""
    return multiple * (card_token_capacity(settings.card, settings.memory_bytes) // multiple)


def budget_for_width(settings: Any, width: int) -> int:
    """The smallest plan budget (at most the budget) under which a row of ``width`` tokens fits: planned
    under it, no wave is much wider than ``width``, so padded to one width the rows still fit."""
    card, budget = settings.card, settings.memory_bytes
    if card_token_capacity(card, budget) <= width:
        return budget
    low, high = 0, budget  # capacity(high) > width
    while high - low > 1:
        middle = (low + high) // 2
        if card_token_capacity(card, middle) >= width:
            high = middle
        else:
            low = middle
    return high


def _planner_at(planner: Any, memory_bytes: int) -> Any:
    """``planner``'s settings and profile with another plan budget."""
    from cpplan.planner import Planner

    s = planner.settings
    return Planner(
        model=s.model,
        topology=s.topology,
        memory_bytes=memory_bytes,
        solver=planner.profile,
        num_layers=s.num_layers,
        phase=s.phase,
    )


def kept_results(
    tokenized_results: Sequence[Any], seq_len: int, *, truncate_long_results: bool
) -> tuple[list[ArtResult], list[tuple[int, str]]]:
    """The results ART packs, each cut to ``seq_len`` tokens where ART cuts it, and the input
    positions of the others with the reason. Raises ``InputError`` on what ART cannot pack right."""
    kept: list[ArtResult] = []
    left_out: list[tuple[int, str]] = []
    prompts: dict[int, ArtResult] = {}
    for index, source in enumerate(tokenized_results):
        field = f"tokenized_results[{index}]"
        if (
            getattr(source, "pixel_values", None) is not None
            or getattr(source, "image_grid_thw", None) is not None
        ):
            raise InputError(
                "vision inputs (pixel_values, image_grid_thw) are not supported by cpplan's ART packer; "
                "pack this step with ART's own packer",
                field=field,
            )
        token_ids = [int(t) for t in source.token_ids]
        n = len(token_ids)
        lengths = {name: len(getattr(source, name)) for name in ("input_pos", "assistant_mask", "logprobs")}
        bad = {name: length for name, length in lengths.items() if length != n}
        if bad:
            raise InputError(
                f"has {n} token_ids but {bad} (every field holds one entry a token)", field=field
            )
        prompt_length = int(source.prompt_length)
        if not 0 <= prompt_length <= n:
            raise InputError(f"prompt_length {prompt_length} is outside [0, {n}]", field=field)
        mask = [int(bool(m)) for m in source.assistant_mask]
        if n > seq_len and not truncate_long_results:
            left_out.append((index, f"{n} tokens, over seq_len {seq_len} (truncate_long_results is off)"))
            continue
        if not any(mask[prompt_length:]):
            left_out.append((index, "no assistant token after its prompt (ART skips it)"))
            continue
        if prompt_length and any(mask[: prompt_length + 1]):
            raise InputError(
                f"has an assistant token within its first prompt_length + 1 = {prompt_length + 1} tokens: "
                "ART's shared-prompt rows would score it once a row, not once a result",
                field=field,
            )
        keep = min(n, seq_len)
        if not any(mask[:keep]):
            left_out.append((index, f"its first seq_len = {seq_len} tokens hold no assistant token"))
            continue
        result = ArtResult(
            index=index,
            prompt_id=int(source.prompt_id),
            prompt_length=prompt_length,
            token_ids=tuple(token_ids[:keep]),
            input_pos=tuple(int(p) for p in source.input_pos[:keep]),
            assistant_mask=tuple(mask[:keep]),
            logprobs=tuple(float(p) for p in source.logprobs[:keep]),
            advantage=float(source.advantage),
            weight=float(source.weight),
        )
        first = prompts.setdefault(result.prompt_id, result)
        if first.prompt_length != prompt_length or (
            first.token_ids[:prompt_length] != result.token_ids[:prompt_length]
            or first.input_pos[:prompt_length] != result.input_pos[:prompt_length]
        ):
            raise InputError(
                f"shares prompt_id {result.prompt_id} with tokenized_results[{first.index}] but not its "
                f"prompt (prompt_length {prompt_length} against {first.prompt_length}, or other prompt "
                "tokens or positions)",
                field=field,
            )
        kept.append(result)
    return kept, left_out


def results_workload(results: Sequence[ArtResult]) -> tuple[Workload, dict[str, list[int]]]:
    """The cpplan workload of ``results``: one item per ART prompt group (``g0``, ``g1``, .. in order of
    first appearance), one request per result, every token priced with its logits (ART's trainers
    compute the log-probs of every row position, not only the assistant tokens'). The request tokens
    are keys, not token ids: a group's first ``prompt_length`` keys are common to its results and
    every other key is used once, so the prefix tree shares exactly what ART's ids can express (a
    prompt under its completions, nothing across groups or deeper). Also the results of each item,
    in request order (indices into ``results``)."""
    groups: dict[int, list[int]] = {}
    for k, result in enumerate(results):
        groups.setdefault(result.prompt_id, []).append(k)
    items, members, next_key = [], {}, 0
    for number, indices in enumerate(groups.values()):
        prompt_length = results[indices[0]].prompt_length
        prompt_keys = np.arange(next_key, next_key + prompt_length, dtype=np.int64)
        next_key += prompt_length
        requests = []
        for k in indices:
            own = results[k].num_tokens - prompt_length
            keys = np.r_[prompt_keys, np.arange(next_key, next_key + own, dtype=np.int64)]
            next_key += own
            requests.append(Request(tokens=keys))
        item_id = f"g{number}"
        items.append(Item(id=item_id, requests=tuple(requests)))
        members[item_id] = indices
    return Workload.from_items(items, token_ids=False), members


@dataclass(frozen=True, kw_only=True)
class Row:
    """One packed row before padding: per position the kept result (index into the kept results) and
    its token index there, the prompt copy (``copy``, -1 for a result's own tokens) and the results it
    holds (``members``)."""

    result: np.ndarray
    token: np.ndarray
    copy: np.ndarray
    members: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        """Positions of the row."""
        return int(self.result.size)


def plan_rows(
    result: PlanResult, workload: Workload, members: dict[str, list[int]], results: Sequence[ArtResult]
) -> list[Row]:
    """One :class:`Row` per planned wave: each packed position's result and token index read back
    from the wave's request chains (a shared prompt position takes its first reader's), its prompt copy
    (the packed position of its readers' first token) where it is a prompt token."""
    rows = []
    for wave in range(result.plan.num_waves):
        batch = materialize_wave(result.plan, workload, wave=wave)[0]
        size = batch.packed_tokens
        at_result = np.full(size, -1, dtype=np.int64)
        at_token = np.full(size, -1, dtype=np.int64)
        copy = np.full(size, -1, dtype=np.int64)
        held = []
        for k, (item_id, request) in enumerate(batch.requests):
            r = members[item_id][request]
            held.append(r)
            positions = batch.readback(k).numpy()
            prompt = results[r].prompt_length
            own = positions[prompt:]
            if own.size and not np.array_equal(own, own[0] + np.arange(own.size)):
                raise AssertionError(
                    f"wave {wave}: result {results[r].index}'s own tokens are not contiguous"
                )
            if prompt and own.size and positions[prompt - 1] >= own[0]:
                raise AssertionError(f"wave {wave}: result {results[r].index}'s prompt is not before it")
            fresh = at_result[positions] < 0
            at_result[positions[fresh]] = r
            at_token[positions[fresh]] = np.flatnonzero(fresh)
            copy[positions[:prompt]] = positions[0]
        assert (at_result >= 0).all(), f"wave {wave}: a packed position no result reads"
        rows.append(Row(result=at_result, token=at_token, copy=copy, members=tuple(sorted(held))))
    return rows


def first_fit_rows(results: Sequence[ArtResult], width: int) -> list[Row]:
    """ART's own packing at ``width`` tokens a row instead of ``seq_len``: results in order, each into
    the current row if it fits (its prompt not written again when the row holds it), else a new row."""
    rows: list[Row] = []
    parts: list[tuple[int, np.ndarray, np.ndarray]] = []
    used, prompts = 0, set()

    def close() -> None:
        rows.append(
            Row(
                result=np.concatenate([np.full(t.size, k, dtype=np.int64) for k, t, _ in parts]),
                token=np.concatenate([t for _, t, _ in parts]),
                copy=np.concatenate([c for _, _, c in parts]),
                members=tuple(sorted({k for k, _, _ in parts})),
            )
        )

    for k, result in enumerate(results):
        shared = result.prompt_length > 0 and result.prompt_id in prompts
        start = result.prompt_length if shared else 0
        need = result.num_tokens - start
        if parts and used + need > width:
            close()
            parts, used, prompts = [], 0, set()
            shared, start, need = False, 0, result.num_tokens
        tokens = np.arange(start, result.num_tokens, dtype=np.int64)
        copy = np.where(tokens < result.prompt_length, used, -1).astype(np.int64)
        parts.append((k, tokens, copy))
        used += need
        prompts.add(result.prompt_id)
    close()
    return rows


def unpacked_row(result: ArtResult, k: int) -> Row:
    """The row of one result alone (ART's ``pack_results=False``): its prompt, then its own tokens."""
    n = result.num_tokens
    copy = np.where(np.arange(n) < result.prompt_length, 0, -1).astype(np.int64)
    return Row(result=np.full(n, k, dtype=np.int64), token=np.arange(n), copy=copy, members=(k,))


def row_tensors(
    rows: Sequence[Row],
    width: int,
    results: Sequence[ArtResult],
    *,
    pad_token_id: int,
    advantage_balance: float,
) -> dict[str, Any]:
    """ART's ``PackedTensors`` of ``rows`` padded to ``width`` columns (padding as ART pads), the
    weights and advantages normalized as ART normalizes them. Group ids: a row's first copy of a
    prompt carries the prompt's ``prompt_id`` (a second copy, where the plan did not share it, a fresh
    id), each result's own tokens a fresh id; every token of a result has its prompt copy's id as
    parent (the result's ``prompt_id`` without a prompt, as ART writes it)."""
    offsets = np.cumsum([0, *(r.num_tokens for r in results)])
    flat = {
        "tokens": np.concatenate([r.token_ids for r in results]).astype(np.int64),
        "input_pos": np.concatenate([r.input_pos for r in results]).astype(np.int64),
        "assistant_mask": np.concatenate([r.assistant_mask for r in results]).astype(bool),
        "logprobs": np.concatenate([r.logprobs for r in results]).astype(np.float64),
    }
    advantage = np.array([r.advantage for r in results])
    weight = np.array([r.weight for r in results])
    prompt_ids = np.array([r.prompt_id for r in results], dtype=np.int64)
    num_rows = len(rows)
    out = {
        "tokens": np.full((num_rows, width), pad_token_id, dtype=np.int64),
        "group_ids": np.full((num_rows, width), -1, dtype=np.int64),
        "parent_ids": np.full((num_rows, width), -1, dtype=np.int64),
        "input_pos": np.zeros((num_rows, width), dtype=np.int64),
        "assistant_mask": np.zeros((num_rows, width), dtype=bool),
        "logprobs": np.full((num_rows, width), np.nan),
        "advantages": np.zeros((num_rows, width)),
        "weights": np.zeros((num_rows, width)),
    }
    ids = _GroupIds(set(prompt_ids.tolist()))
    for i, row in enumerate(rows):
        n = row.num_tokens
        at = offsets[row.result] + row.token
        for key, values in flat.items():
            out[key][i, :n] = values[at]
        out["advantages"][i, :n] = advantage[row.result]
        out["weights"][i, :n] = weight[row.result]
        out["group_ids"][i, :n], out["parent_ids"][i, :n] = _row_groups(row, prompt_ids, ids)
    real = torch.get_default_dtype()
    assistant_mask = torch.from_numpy(out["assistant_mask"])
    weights_tensor, advantages_tensor = art_normalized(
        assistant_mask,
        torch.from_numpy(out["weights"]).to(real),
        torch.from_numpy(out["advantages"]).to(real),
        advantage_balance,
    )
    return {
        "tokens": torch.from_numpy(out["tokens"]),
        "group_ids": torch.from_numpy(out["group_ids"]),
        "parent_ids": torch.from_numpy(out["parent_ids"]),
        "input_pos": torch.from_numpy(out["input_pos"]),
        "assistant_mask": assistant_mask,
        "logprobs": torch.from_numpy(out["logprobs"]).to(real),
        "advantages": advantages_tensor,
        "weights": weights_tensor,
        "pixel_values": [None] * num_rows,
        "image_grid_thw": [None] * num_rows,
    }


def _row_groups(row: Row, prompt_ids: np.ndarray, ids: _GroupIds) -> tuple[np.ndarray, np.ndarray]:
    """One row's group and parent ids (see :func:`row_tensors`)."""
    group = np.empty(row.num_tokens, dtype=np.int64)
    copy_id, used = {}, set()
    for start in np.unique(row.copy[row.copy >= 0]).tolist():  # one id per prompt copy
        prompt_id = int(prompt_ids[row.result[start]])
        copy_id[start] = prompt_id if prompt_id not in used else ids.fresh()
        used.add(prompt_id)
    own_id = {r: ids.fresh() for r in row.members}
    prompt = row.copy >= 0
    group[prompt] = [copy_id[c] for c in row.copy[prompt].tolist()]
    group[~prompt] = [own_id[r] for r in row.result[~prompt].tolist()]
    first = {r: int(np.flatnonzero(row.result == r)[0]) for r in row.members}
    parent_of = {
        r: copy_id[int(row.copy[p])] if row.copy[p] >= 0 else int(prompt_ids[r]) for r, p in first.items()
    }
    parent = group.copy()
    parent[~prompt] = [parent_of[r] for r in row.result[~prompt].tolist()]
    return group, parent


def art_normalized(
    assistant_mask: torch.Tensor, weights: torch.Tensor, advantages: torch.Tensor, advantage_balance: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ART's normalization over the packed batch, operation for operation: weights zero off the
    assistant mask, then divided by their mean on it; advantages zero off the mask, rebalanced by
    ``advantage_balance``, then divided by the mean of ``|advantage| * weight`` on it."""
    weights = torch.where(assistant_mask, weights, torch.zeros_like(weights))
    weights[assistant_mask] /= weights[assistant_mask].mean()
    advantages = torch.where(assistant_mask, advantages, torch.zeros_like(advantages))
    if advantage_balance > 0.0:
        advantages = torch.where(advantages > 0, advantages, advantages * (1 - advantage_balance))
    elif advantage_balance < 0.0:
        advantages = torch.where(advantages < 0, advantages, advantages * (1 + advantage_balance))
    advantages[assistant_mask] /= (advantages[assistant_mask].abs() * weights[assistant_mask]).mean()
    return weights, advantages


class _GroupIds:
    """Fresh group ids, counting up from 0, never one of the prompt ids, nor ART's padding ``-1``."""

    def __init__(self, taken: set[int]) -> None:
        self._taken = taken
        self._next = 0

    def fresh(self) -> int:
        while self._next in self._taken:
            self._next += 1
        self._next += 1
        return self._next - 1


__all__ = [
    "PACKED_KEYS",
    "ArtPacking",
    "ArtResult",
    "kept_results",
    "make_planner",
    "pack_results_with_plan",
    "packed_tensors_from_tokenized_results",
    "packer",
    "results_workload",
]

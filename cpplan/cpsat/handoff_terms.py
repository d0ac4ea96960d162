"""The GDN hand-off of one column in the ownership model: every mode the card prices (rounds, parallel,
head-parallel), the cheaper one taken (one of three booleans), so the model never prices a hand-off
above the evaluator's (:mod:`cpplan.pricing.handoff`).

Under a contiguous rank-ordered split (:mod:`~cpplan.cpsat.rank_split`) a piece's predecessor is never
on a later rank, so a crossing is ``owner(b) > owner(a)`` for chunks ``a < b`` (:func:`crossing`).
Crossings, rounds, the parallel mode's ``max before + max after - max T`` and the head-parallel mode are
exact; the rounds mode's waiting tokens ``Σ_k max_r W[r, k] - max_r T_r`` are a lower bound,
``max(longest request path, max_a W0_a + max_b L_b) - max_r T_r`` (``W0_a``: at most rank a's round-0
tokens; ``L_b``: at most rank b's later-round tokens), exact with at most two rounds where prefix trees
are contiguous (docs/cpsat.md, "The GDN hand-off").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from cpplan.cpsat.rank_split import RankSplit
from cpplan.cpsat.split_tables import SplitTables
from cpplan.spec.card import HandoffSeconds


@dataclass(frozen=True, kw_only=True, eq=False)
class HandoffVars:
    """The hand-off's time in model units, and whether it takes the parallel or the head-parallel mode
    (for tests)."""

    units: cp_model.IntVar
    parallel: cp_model.IntVar
    head_parallel: cp_model.IntVar


def exact_min(model: cp_model.CpModel, a, b, upper: int, name: str) -> cp_model.IntVar:
    """A variable equal to ``min(a, b)`` (both linear, at most ``upper``)."""
    m = model.new_int_var(0, upper, name)
    first = model.new_bool_var(f"{name}.first")
    model.add(m <= a)
    model.add(m <= b)
    model.add(m >= a).only_enforce_if(first)
    model.add(m >= b).only_enforce_if(~first)
    return m


def exact_positive(model: cp_model.CpModel, a, upper: int, name: str) -> cp_model.IntVar:
    """A variable equal to ``max(0, a)`` (``a`` linear, at most ``upper``)."""
    v = model.new_int_var(0, upper, name)
    positive = model.new_bool_var(f"{name}.positive")
    model.add(v >= a)
    model.add(v <= a).only_enforce_if(positive)
    model.add(v == 0).only_enforce_if(~positive)
    return v


@dataclass(eq=False)
class Crossings:
    """Crossing booleans of one split, made once per chunk pair."""

    model: cp_model.CpModel
    split: RankSplit
    made: dict[tuple[int, int], cp_model.LinearExprT]

    def __call__(self, a: int, b: int) -> cp_model.LinearExprT:
        """1 when chunk ``b``'s owner is after chunk ``a``'s (``a < b``), else 0."""
        if b <= a:
            return 0
        key = (a, b)
        if key not in self.made:
            const, parts = self.split.owner_gap(a, b)
            if const > 0:
                self.made[key] = 1
            elif not parts:
                self.made[key] = 0
            else:
                var = self.model.new_bool_var(f"{self.split.name}.cross[{a},{b}]")
                for part in parts:
                    self.model.add(var >= part)
                self.model.add(var <= sum(parts))
                self.made[key] = var
        return self.made[key]


def add_handoff(
    model: cp_model.CpModel,
    split: RankSplit,
    tables: SplitTables,
    tokens: list,
    seconds: HandoffSeconds,
    unit_s: float,
) -> HandoffVars:
    """The column's hand-off (see the module docstring), in time units of ``unit_s`` seconds, each price
    rounded down."""
    name, cp = split.name, split.num_ranks
    cross = Crossings(model=model, split=split, made={})
    packed = int(tables.stats.packed_tokens)
    internal = {c: cross(c - 1, c) for c in np.flatnonzero(tables.continues >= 0).tolist() if c >= 1}
    terms = list(internal.values()) + _parent_crossings(tables, cross)
    crossings = sum(terms)
    anything = _any(model, terms, f"{name}.crosses")
    extra_rounds = model.new_int_var(0, cp - 1, f"{name}.extra_rounds")
    for count in _path_counts(tables, cross, internal):
        model.add(extra_rounds >= count)
    ranks = _rank_parts(model, split, tables, tokens, packed)
    most_tokens = model.new_int_var(0, packed, f"{name}.max_tokens")
    chosen = [model.new_bool_var(f"{name}.max_tokens_at[{r}]") for r in range(cp)]
    model.add_exactly_one(chosen)
    for r in range(cp):
        model.add(most_tokens <= tokens[r]).only_enforce_if(chosen[r])
    most_before = _at_least_each(model, [p.before for p in ranks], 2 * packed, f"{name}.max_before")
    most_after = _at_least_each(model, [p.after for p in ranks], packed, f"{name}.max_after")
    most_first = _at_least_each(model, [p.first_round for p in ranks], packed, f"{name}.max_first_round")
    most_later = _at_least_each(model, [p.later_rounds for p in ranks], packed, f"{name}.max_later_rounds")
    rounds_wait = model.new_int_var(0, packed, f"{name}.rounds_wait")
    model.add(rounds_wait >= tables.longest_path_tokens - most_tokens)
    model.add(rounds_wait >= most_first + most_later - most_tokens)

    round_u, state_u = _units(seconds.round_s, unit_s), _units(seconds.state_s, unit_s)
    wait_u = _units(seconds.wait_s_per_token, unit_s)
    parallel = model.new_bool_var(f"{name}.parallel")
    heads = model.new_bool_var(f"{name}.head_parallel")
    rounds = model.new_bool_var(f"{name}.rounds")
    model.add_exactly_one([rounds, parallel, heads])
    handoff = model.new_int_var(0, _upper(seconds, cp, packed, len(terms), unit_s), f"{name}.handoff")
    by_rounds = round_u * extra_rounds + state_u * crossings + wait_u * rounds_wait
    parallel_wait = most_before + most_after - most_tokens
    by_parallel = round_u * anything + 2 * state_u * crossings + wait_u * parallel_wait
    model.add(handoff >= by_rounds).only_enforce_if(rounds)
    model.add(handoff >= by_parallel).only_enforce_if(parallel)
    if seconds.head_parallel_priced:
        _add_head_parallel(model, handoff, heads, tables, tokens, seconds, unit_s, name)
    else:
        model.add(heads == 0)
    return HandoffVars(units=handoff, parallel=parallel, head_parallel=heads)


def add_reordered_handoff(
    model: cp_model.CpModel,
    split: RankSplit,
    tables: SplitTables,
    order: np.ndarray,
    tokens: list,
    seconds: HandoffSeconds,
    unit_s: float,
) -> HandoffVars:
    """The hand-off of a split taken in chunk order ``order`` (a rank's chunks need not be contiguous),
    never above the evaluator's: head-parallel exactly, else the rounds mode's floor (one round where
    anything crosses, one state per crossing, no waiting). Two chunks' owners differ where a rank
    boundary falls between their positions in ``order``; a parent counts once, however many children
    cross."""
    name, position = split.name, np.argsort(order)
    cross = Crossings(model=model, split=split, made={})

    def differ(a: int, b: int) -> cp_model.LinearExprT:
        return cross(*sorted((int(position[a]), int(position[b]))))

    terms = [differ(c - 1, c) for c in np.flatnonzero(tables.continues >= 0).tolist() if c >= 1]
    children: dict[int, list] = {}
    for s in np.flatnonzero(tables.seg_parent >= 0).tolist():
        p = int(tables.seg_parent[s])
        children.setdefault(p, []).append(
            differ(int(tables.seg_last_chunk[p]), int(tables.seg_first_chunk[s]))
        )
    terms += [_any(model, parts, f"{name}.parent_crosses[{p}]") for p, parts in sorted(children.items())]
    upper = _upper(seconds, split.num_ranks, int(tables.stats.packed_tokens), len(terms), unit_s)
    handoff, heads = (
        model.new_int_var(0, upper, f"{name}.handoff"),
        model.new_bool_var(f"{name}.head_parallel"),
    )
    by_rounds = _units(seconds.round_s, unit_s) * _any(model, terms, f"{name}.crosses")
    model.add(handoff >= by_rounds + _units(seconds.state_s, unit_s) * sum(terms)).only_enforce_if(~heads)
    if seconds.head_parallel_priced:
        _add_head_parallel(model, handoff, heads, tables, tokens, seconds, unit_s, name)
    else:
        model.add(heads == 0)
    return HandoffVars(units=handoff, parallel=model.new_constant(0), head_parallel=heads)


def _any(model: cp_model.CpModel, terms: list, name: str) -> cp_model.IntVar:
    """A boolean at least each of ``terms`` (each 0 or 1)."""
    var = model.new_bool_var(name)
    for term in terms:
        model.add(var >= term)
    return var


def _units(value_s: float, unit_s: float) -> int:
    """``value_s`` in time units of ``unit_s`` seconds, rounded down."""
    return int(np.floor(value_s / unit_s + 1e-9))


def _add_head_parallel(
    model, handoff, chosen, tables: SplitTables, tokens: list, seconds, unit_s, name
) -> None:
    """Head-parallel GDN (:mod:`cpplan.pricing.head_parallel`): its latency, the busiest rank's rows
    moved per all-to-all, ``max_r max(T_r (cp - 1) / cp, (P - T_r) / cp)``, and one serial call per tree
    level beyond the first; the row written times ``cp`` so it stays in integers."""
    cp, packed = len(tokens), int(tables.stats.packed_tokens)
    moved = model.new_int_var(0, packed * cp, f"{name}.head_rows_times_cp")
    for t in tokens:
        model.add(moved >= (cp - 1) * t)
        model.add(moved >= packed - t)
    per_row = int(np.floor(seconds.head_s_per_token / unit_s + 1e-9))
    fixed = int(
        np.floor((seconds.head_collective_s + max(tables.tree_levels - 1, 0) * seconds.head_level_s) / unit_s)
    )
    model.add(cp * handoff >= cp * fixed + per_row * moved).only_enforce_if(chosen)


def _upper(seconds: HandoffSeconds, cp: int, packed: int, num_terms: int, unit_s: float) -> int:
    total_s = cp * seconds.round_s + 2 * num_terms * seconds.state_s + 3 * packed * seconds.wait_s_per_token
    return int(np.ceil(total_s / unit_s)) + 1


def _parent_crossings(tables: SplitTables, cross: Crossings) -> list:
    """Per parent segment: whether some child's first chunk lies on a later rank than the parent's last
    chunk (its last child's, as owners only grow along the packed order)."""
    parent = tables.seg_parent
    last_child_first: dict[int, int] = {}
    for s in np.flatnonzero(parent >= 0).tolist():
        p = int(parent[s])
        last_child_first[p] = max(last_child_first.get(p, -1), int(tables.seg_first_chunk[s]))
    return [cross(int(tables.seg_last_chunk[p]), first) for p, first in sorted(last_child_first.items())]


def _path_counts(tables: SplitTables, cross: Crossings, internal: dict) -> list:
    """Per distinct request path, the crossings along it: the boundaries cutting its segments and its
    parent-to-child steps."""
    inside: dict[int, list] = {}
    for c, term in internal.items():
        inside.setdefault(int(tables.continues[c]), []).append(term)
    counts, seen = [], set()
    for chain in tables.request_chains:
        key = tuple(chain.tolist())
        if key in seen:
            continue
        seen.add(key)
        total: list = []
        for k, s in enumerate(key):
            total.extend(inside.get(s, []))
            if k > 0:
                total.append(cross(int(tables.seg_last_chunk[key[k - 1]]), int(tables.seg_first_chunk[s])))
        variable = [t for t in total if not isinstance(t, int)]
        if variable or sum(total):
            counts.append(sum(total))
    return counts


@dataclass(frozen=True, kw_only=True, eq=False)
class _RankParts:
    before: cp_model.LinearExprT
    after: cp_model.LinearExprT
    first_round: cp_model.LinearExprT
    later_rounds: cp_model.LinearExprT


def _rank_parts(model, split: RankSplit, tables: SplitTables, tokens: list, packed: int) -> list[_RankParts]:
    """Per rank: tokens of pieces from zero, the parallel mode's before / after tokens, and the tokens of
    the segment its range starts inside (see the module docstring)."""
    cp, name = split.num_ranks, split.name
    after_root = tables.cut_after * tables.cut_is_root
    before_leaf = tables.cut_before * tables.cut_is_leaf
    root_leaf = tables.cut_is_root & tables.cut_is_leaf
    parts = []
    for r in range(cp):
        t = tokens[r]

        def cut_min(table: np.ndarray, boundary: int, label: str, t=t, r=r):
            if not table.any() or boundary <= 0 or boundary >= cp:
                return 0
            return exact_min(model, split.at_start(boundary, table), t, packed, f"{name}.{label}[{r}]")

        zero = split.owned(r, tables.root_tokens) - cut_min(after_root, r, "root_cut")
        leaf_last = split.owned(r, tables.leaf_tokens) - cut_min(before_leaf, r + 1, "leaf_cut")
        whole = (
            split.owned(r, tables.root_leaf_tokens)
            - cut_min(tables.cut_after * root_leaf, r, "root_leaf_start")
            - cut_min(tables.cut_before * root_leaf, r + 1, "root_leaf_end")
        )
        inside = exact_positive(model, whole, packed, f"{name}.root_leaf_inside[{r}]")
        last = leaf_last - inside
        parts.append(
            _RankParts(
                before=2 * t - zero - 2 * last,
                after=t - zero,
                first_round=t - cut_min(tables.straddle_after, r, "rooted_before"),
                later_rounds=_later_rounds(
                    model, split, tables, r, cut_min(tables.straddle_run, r, "rooted_run")
                ),
            )
        )
    return parts


def _later_rounds(model, split: RankSplit, tables: SplitTables, r: int, run) -> cp_model.LinearExprT:
    """A lower bound of rank ``r``'s tokens in rounds after the first: tokens of trees rooted before its
    start lie in round 1 or later, and on the rank are at least their unbroken run from its start and at
    least all of them after its start less the tokens of the ranks after it (exact on the last rank)."""
    if r == 0:
        return 0
    packed = int(tables.stats.packed_tokens)
    later = model.new_int_var(0, packed, f"{split.name}.later_rounds[{r}]")
    model.add(later >= run)
    model.add(later >= split.at_start(r, tables.straddle_after) - split.suffix(r + 1, tables.tokens))
    return later


def _at_least_each(model: cp_model.CpModel, values: list, upper: int, name: str) -> cp_model.IntVar:
    var = model.new_int_var(-upper, upper, name)
    for value in values:
        model.add(var >= value)
    return var

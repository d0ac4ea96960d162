"""Layout: per-wave sharing of cross nodes, their copies, and each wave's totals.

For a cross node v (:mod:`cpplan.cpsat.space`) and wave w: ``n[v, w]`` (present) is the OR of its items'
presence; ``s[v, w]`` (shared) the decision; ``c[v, w]`` (copies) ``≥ n`` and, when not shared, ``≥``
its children's copies in w plus the requests ending at v (the copies
:func:`cpplan.pricing.layout.pack` makes); ``st[v, w]`` (segment starts) ``≥ c[v, w]`` when v's parent
is the root or shared. Items' local roots under a shared cross parent start ``z ≥ copies`` segments.
Wave totals are linear in these: every additive quantity, segment starts (an upper bound of the packed
segments) and time units (a wave that takes an exact column counts nothing here).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.space import LayoutSpace
from cpplan.cpsat.waves import WaveVars
from cpplan.spec.quantities import ADDITIVE, QUANTITY_INDEX


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveTotals:
    """Linear expressions per wave (``amounts[name][w]`` for every additive quantity, segment starts and
    time units), and upper bounds of the packed tokens, segment starts and time units of any wave."""

    amounts: dict[str, list[cp_model.LinearExprT]]
    segments: list[cp_model.LinearExprT]
    time_units: list[cp_model.LinearExprT]
    packed_tokens_ub: int
    segments_ub: int
    time_units_ub: int

    @property
    def packed_tokens(self) -> list[cp_model.LinearExprT]:
        """Packed tokens per wave."""
        return self.amounts["tokens"]


@dataclass(frozen=True, kw_only=True, eq=False)
class LayoutVars:
    """Per cross node k (index into ``space.cross``) and wave w: n, s, c, st; z per local root."""

    n: list[list[cp_model.IntVar | None]]
    s: list[list[cp_model.IntVar | None]]
    c: list[list[cp_model.IntVar | None]]
    st: list[list[cp_model.IntVar | None]]
    z: dict[tuple[int, int, int], cp_model.IntVar]
    totals: WaveTotals


def add_layout(model: cp_model.CpModel, space: LayoutSpace, waves: WaveVars, num_ranks: int) -> LayoutVars:
    """Cross-node variables and the per-wave totals."""
    tree = _CrossTree.of(space)
    num_cross = len(space.cross)
    v = _Vars(*([[None] * waves.num_waves for _ in range(num_cross)] for _ in range(4)), z={})
    for w in range(waves.num_waves):
        for k in range(num_cross):
            _add_presence(model, space, waves, v, k, w)
    for w in range(waves.num_waves):
        for k in reversed(range(num_cross)):  # children before parents
            if v.c[k][w] is not None:
                _add_copies(model, space, waves, tree, v, k, w)
                _add_starts(model, space, waves, tree, v, k, w)
    totals = _totals(space, waves, v.c, v.st, v.z, num_ranks)
    return LayoutVars(n=v.n, s=v.s, c=v.c, st=v.st, z=v.z, totals=totals)


@dataclass(eq=False)
class _Vars:
    """The grids of :class:`LayoutVars` while they are filled in."""

    n: list[list]
    s: list[list]
    c: list[list]
    st: list[list]
    z: dict[tuple[int, int, int], cp_model.IntVar]


@dataclass(frozen=True, kw_only=True)
class _CrossTree:
    """Per cross node: its cross children, the items' local roots under it and the requests ending at it."""

    children: dict[int, list[int]]
    roots_under: dict[int, list[tuple[int, int, int]]]
    ends_at: dict[int, list[tuple[int, int]]]

    @classmethod
    def of(cls, space: LayoutSpace) -> _CrossTree:
        index = space.cross_index
        roots_under: dict[int, list[tuple[int, int, int]]] = {}
        ends_at: dict[int, list[tuple[int, int]]] = {}
        for item in space.items:
            for r, (u, p) in enumerate(item.roots):
                roots_under.setdefault(p, []).append((item.item, r, u))
            for v, count in item.ends:
                ends_at.setdefault(v, []).append((item.item, count))
        children: dict[int, list[int]] = {}
        for k, node in enumerate(space.cross):
            if node.parent in index:
                children.setdefault(node.parent, []).append(k)
        return cls(children=children, roots_under=roots_under, ends_at=ends_at)


def _add_presence(model, space: LayoutSpace, waves: WaveVars, layout: _Vars, k: int, w: int) -> None:
    """``n``, ``s`` and ``c`` of cross node k in wave w, when an item through it may use the wave."""
    node, x, presence = space.cross[k], waves.x, waves.presence
    items = [i for i in node.items if x[i][w]]
    if not items:
        return
    n = layout.n[k][w] = model.new_bool_var(f"n[{node.node},{w}]")
    layout.s[k][w] = model.new_bool_var(f"s[{node.node},{w}]")
    c = layout.c[k][w] = model.new_int_var(0, node.max_copies, f"c[{node.node},{w}]")
    for i in items:
        model.add(n >= presence[i][w])
    model.add(n <= sum(presence[i][w] for i in items))
    model.add(c >= n)


def _add_copies(model, space: LayoutSpace, waves: WaveVars, tree: _CrossTree, layout: _Vars, k, w) -> None:
    """Unshared, cross node k has at least its children's copies plus the requests ending at it."""
    node, x, c = space.cross[k], waves.x, layout.c
    terms = [c[j][w] for j in tree.children.get(node.node, []) if c[j][w] is not None]
    for i, r, _ in tree.roots_under.get(node.node, []):
        if x[i][w]:
            layouts = space.items[i].layouts
            terms.append(sum(lay.root_copies[r] * x[i][w][j] for j, lay in enumerate(layouts)))
    for i, count in tree.ends_at.get(node.node, []):
        if x[i][w]:
            terms.append(count * waves.presence[i][w])
    model.add(c[k][w] >= sum(terms)).only_enforce_if(~layout.s[k][w])


def _add_starts(model, space: LayoutSpace, waves: WaveVars, tree: _CrossTree, layout: _Vars, k, w) -> None:
    """Segment starts of cross node k (all its copies when its parent is the root or shared) and of the
    items' local roots under it (when k is shared)."""
    node, x, s = space.cross[k], waves.x, layout.s
    index = space.cross_index
    if node.parent in index:
        p = index[node.parent]
        layout.st[k][w] = model.new_int_var(0, node.max_copies, f"st[{node.node},{w}]")
        model.add(layout.st[k][w] >= layout.c[k][w] - node.max_copies * (1 - s[p][w]))
    else:
        layout.st[k][w] = layout.c[k][w]
    for i, r, u in tree.roots_under.get(node.node, []):
        if not x[i][w]:
            continue
        item = space.items[i]
        bound = item.root_max_copies[r]
        var = model.new_int_var(0, bound, f"z[{u},{w}]")
        copies = sum(lay.root_copies[r] * x[i][w][j] for j, lay in enumerate(item.layouts))
        model.add(var >= copies - bound * (1 - s[k][w]))
        layout.z[(i, r, w)] = var


def _totals(space: LayoutSpace, waves: WaveVars, c, st, z, num_ranks: int) -> WaveTotals:
    amounts: dict[str, list] = {q.name: [] for q in ADDITIVE}
    segments, time_units = [], []
    for w in range(waves.num_waves):
        terms = _WaveTerms()
        for k, node in enumerate(space.cross):
            if c[k][w] is not None:
                terms.add(c[k][w], node.amounts, node.time_units)
                terms.starts(st[k][w], 1)
        for item in space.items:
            row = waves.x[item.item][w]
            for j, lay in enumerate(item.layouts) if row else ():
                terms.add(row[j], lay.amounts, lay.time_units)
                if lay.fixed_starts:
                    terms.starts(row[j], lay.fixed_starts)
        for (_, _, ww), var in z.items():
            if ww == w:
                terms.starts(var, 1)
        for name, column in amounts.items():
            column.append(terms.sum(name))
        seg = cp_model.LinearExpr.weighted_sum(terms.start_vars, terms.start_coefs)
        segments.append(seg)
        time_units.append(
            cp_model.LinearExpr.weighted_sum(terms.time_vars, terms.time_coefs)
            + space.segment_time_units * seg
            + space.segment_time_units * (num_ranks - 1) * waves.modelled[w]
        )
    return WaveTotals(
        amounts=amounts,
        segments=segments,
        time_units=time_units,
        **_upper_bounds(space, num_ranks),
    )


class _WaveTerms:
    """The variables and coefficients of one wave's totals, collected in model order."""

    def __init__(self) -> None:
        self.vars: dict[str, list] = {q.name: [] for q in ADDITIVE}
        self.coefs: dict[str, list[int]] = {q.name: [] for q in ADDITIVE}
        self.time_vars: list = []
        self.time_coefs: list[int] = []
        self.start_vars: list = []
        self.start_coefs: list[int] = []

    def add(self, var, amounts: tuple[int, ...], time_units: int) -> None:
        """A node copy (or a local layout) chosen by ``var``: its amounts and its time."""
        for name, vs in self.vars.items():
            coef = amounts[QUANTITY_INDEX[name]]
            if coef:
                vs.append(var), self.coefs[name].append(coef)
        self.time_vars.append(var), self.time_coefs.append(time_units)

    def starts(self, var, count: int) -> None:
        """``count`` segment starts per unit of ``var``."""
        self.start_vars.append(var), self.start_coefs.append(count)

    def sum(self, name: str) -> cp_model.LinearExprT:
        """The wave's total of quantity ``name``."""
        return cp_model.LinearExpr.weighted_sum(self.vars[name], self.coefs[name])


def _upper_bounds(space: LayoutSpace, num_ranks: int) -> dict[str, int]:
    tokens = QUANTITY_INDEX["tokens"]
    packed_ub = sum(max(lay.amounts[tokens] for lay in item.layouts) for item in space.items) + sum(
        node.amounts[tokens] * node.max_copies for node in space.cross
    )
    segments_ub = (
        sum(max(lay.fixed_starts for lay in item.layouts) for item in space.items)
        + sum(sum(item.root_max_copies) for item in space.items)
        + sum(node.max_copies for node in space.cross)
    )
    time_ub = (
        sum(max(lay.time_units for lay in item.layouts) for item in space.items)
        + sum(node.time_units * node.max_copies for node in space.cross)
        + space.segment_time_units * (segments_ub + num_ranks)
    )
    return {"packed_tokens_ub": packed_ub, "segments_ub": segments_ub, "time_units_ub": time_ub}

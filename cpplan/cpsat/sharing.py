"""Layout: per-wave sharing of cross nodes, their copies, and each wave's totals.

For a cross node v (see :mod:`cpplan.cpsat.space`) and wave w:

- ``n[v, w]`` (node present) is the OR of the presence of v's items;
- ``s[v, w]`` (shared) is the sharing decision;
- ``c[v, w]`` (copies) ``≥ n``, and when not shared ``≥`` the copies of v's children in w plus the
  requests ending at v: the copies :func:`cpplan.pricing.layout.pack` makes (sharing a node present once in a
  wave is harmless: it has one copy either way);
- ``st[v, w]`` (segment starts) ``≥ c[v, w]`` when v's parent is the root or shared, else ``≥ 0``.

Local layouts of the items supply their own constants (:class:`~cpplan.cpsat.space.LocalLayout`);
their local roots under a cross parent p start ``z ≥ copies`` segments when p is shared.

Wave totals, linear in these variables: packed tokens, gradient tokens, loss tokens, attention
pairs, segment starts (an upper bound of the packed segments) and time units (every node copy's
seconds summed over ranks, plus segment time; a wave that takes an exact column counts nothing here).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.space import LayoutSpace
from cpplan.cpsat.waves import WaveVars


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveTotals:
    """Linear expressions per wave, and their upper bounds."""

    packed_tokens: list[cp_model.LinearExprT]
    grad_tokens: list[cp_model.LinearExprT]
    loss_tokens: list[cp_model.LinearExprT]
    attn_pairs: list[cp_model.LinearExprT]
    grad_attn_pairs: list[cp_model.LinearExprT]
    segments: list[cp_model.LinearExprT]
    time_units: list[cp_model.LinearExprT]
    packed_tokens_ub: int
    segments_ub: int
    time_units_ub: int


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
    num_waves = waves.num_waves
    index = space.cross_index
    roots_under: dict[int, list[tuple[int, int, int]]] = {}
    for item in space.items:
        for r, (u, p) in enumerate(item.roots):
            roots_under.setdefault(p, []).append((item.item, r, u))
    ends_at: dict[int, list[tuple[int, int]]] = {}
    for item in space.items:
        for v, count in item.ends:
            ends_at.setdefault(v, []).append((item.item, count))
    cross_children: dict[int, list[int]] = {}
    for k, node in enumerate(space.cross):
        if node.parent in index:
            cross_children.setdefault(node.parent, []).append(k)
    num_cross = len(space.cross)
    n = [[None] * num_waves for _ in range(num_cross)]
    s = [[None] * num_waves for _ in range(num_cross)]
    c = [[None] * num_waves for _ in range(num_cross)]
    st = [[None] * num_waves for _ in range(num_cross)]
    z: dict[tuple[int, int, int], cp_model.IntVar] = {}
    x, presence = waves.x, waves.presence
    for w in range(num_waves):
        for k, node in enumerate(space.cross):
            items = [i for i in node.items if x[i][w]]
            if not items:
                continue
            n[k][w] = model.new_bool_var(f"n[{node.node},{w}]")
            s[k][w] = model.new_bool_var(f"s[{node.node},{w}]")
            c[k][w] = model.new_int_var(0, node.max_copies, f"c[{node.node},{w}]")
            for i in items:
                model.add(n[k][w] >= presence[i][w])
            model.add(n[k][w] <= sum(presence[i][w] for i in items))
            model.add(c[k][w] >= n[k][w])
    for w in range(num_waves):
        for k in reversed(range(num_cross)):  # children before parents
            node = space.cross[k]
            if c[k][w] is None:
                continue
            terms = [c[j][w] for j in cross_children.get(node.node, []) if c[j][w] is not None]
            for i, r, _ in roots_under.get(node.node, []):
                if x[i][w]:
                    layouts = space.items[i].layouts
                    terms.append(sum(lay.root_copies[r] * x[i][w][j] for j, lay in enumerate(layouts)))
            for i, count in ends_at.get(node.node, []):
                if x[i][w]:
                    terms.append(count * presence[i][w])
            model.add(c[k][w] >= sum(terms)).only_enforce_if(~s[k][w])
            if node.parent in index:
                p = index[node.parent]
                st[k][w] = model.new_int_var(0, node.max_copies, f"st[{node.node},{w}]")
                model.add(st[k][w] >= c[k][w] - node.max_copies * (1 - s[p][w]))
            else:
                st[k][w] = c[k][w]
            for i, r, u in roots_under.get(node.node, []):
                if not x[i][w]:
                    continue
                item = space.items[i]
                bound = item.root_max_copies[r]
                var = model.new_int_var(0, bound, f"z[{u},{w}]")
                copies = sum(lay.root_copies[r] * x[i][w][j] for j, lay in enumerate(item.layouts))
                model.add(var >= copies - bound * (1 - s[k][w]))
                z[(i, r, w)] = var
    totals = _totals(space, waves, c, st, z, num_ranks)
    return LayoutVars(n=n, s=s, c=c, st=st, z=z, totals=totals)


def _totals(space: LayoutSpace, waves: WaveVars, c, st, z, num_ranks: int) -> WaveTotals:
    per_wave: dict[str, list] = {
        key: [] for key in ("packed_tokens", "grad_tokens", "loss_tokens", "attn_pairs", "grad_attn_pairs")
    }
    segments, time_units = [], []
    for w in range(waves.num_waves):
        vs, coefs = {key: [] for key in per_wave}, {key: [] for key in per_wave}
        seg_vars, seg_coefs, time_vars, time_coefs = [], [], [], []
        for k, node in enumerate(space.cross):
            if c[k][w] is None:
                continue
            for key, coef in (
                ("packed_tokens", node.length),
                ("grad_tokens", node.length * node.grad),
                ("loss_tokens", node.length * node.loss),
                ("attn_pairs", node.attn_pairs),
                ("grad_attn_pairs", node.attn_pairs * node.grad),
            ):
                if coef:
                    vs[key].append(c[k][w]), coefs[key].append(coef)
            time_vars.append(c[k][w]), time_coefs.append(node.time_units)
            seg_vars.append(st[k][w]), seg_coefs.append(1)
        for item in space.items:
            row = waves.x[item.item][w]
            for j, lay in enumerate(item.layouts) if row else ():
                for key, coef in (
                    ("packed_tokens", lay.tokens),
                    ("grad_tokens", lay.grad_tokens),
                    ("loss_tokens", lay.loss_tokens),
                    ("attn_pairs", lay.attn_pairs),
                    ("grad_attn_pairs", lay.grad_attn_pairs),
                ):
                    if coef:
                        vs[key].append(row[j]), coefs[key].append(coef)
                time_vars.append(row[j]), time_coefs.append(lay.time_units)
                if lay.fixed_starts:
                    seg_vars.append(row[j]), seg_coefs.append(lay.fixed_starts)
        seg_vars += [var for (i, r, ww), var in z.items() if ww == w]
        seg_coefs += [1] * (len(seg_vars) - len(seg_coefs))
        for key in per_wave:
            per_wave[key].append(cp_model.LinearExpr.weighted_sum(vs[key], coefs[key]))
        seg = cp_model.LinearExpr.weighted_sum(seg_vars, seg_coefs)
        segments.append(seg)
        time_units.append(
            cp_model.LinearExpr.weighted_sum(time_vars, time_coefs)
            + space.segment_time_units * seg
            + space.segment_time_units * (num_ranks - 1) * waves.modelled[w]
        )
    packed_ub = sum(max(lay.tokens for lay in item.layouts) for item in space.items) + sum(
        node.length * node.max_copies for node in space.cross
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
    return WaveTotals(
        **per_wave,
        segments=segments,
        time_units=time_units,
        packed_tokens_ub=packed_ub,
        segments_ub=segments_ub,
        time_units_ub=time_ub,
    )

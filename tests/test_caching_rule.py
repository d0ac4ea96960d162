"""The caching rule: per-problem state lives in the problem's memo, per-card state in the resolved card,
and no module-level cache grows without bound or holds a card, a problem or a tensor."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np

import cpplan
from cpplan.spec.card import CardConstants, ResolvedCard, load_model

PACKAGE = Path(cpplan.__file__).parent

BOUNDED_CACHES = {
    ("version.py", "cpplan_version"): "takes no argument: one string per process",
    ("cpsat/solve.py", "warm_up"): "takes no argument: one call per process, returns nothing",
    ("hf/attention.py", "_compiled"): "at most 2 entries: the compiled flex_attention, no tensor",
    ("pack/readers.py", "_sha256"): "at most 8 entries, each a hex string keyed by path, size and mtime",
    ("pack/conversations.py", "load_tokenizer"): "at most 4 tokenizers (a pack run loads one), no tensor",
    ("pricing/rank_pairs.py", "_subsets"): "at most 4 read-only arrays of at most 2**12 x 12 booleans",
    ("bound/aligned_units.py", "_partitions"): "at most 8 read-only arrays of at most 4,140 x 8 integers",
}
"""The module-level caches allowed, each with why it is bounded and holds nothing the budget prices."""

_CONTAINERS = {
    "dict",
    "list",
    "set",
    "OrderedDict",
    "defaultdict",
    "WeakKeyDictionary",
    "WeakValueDictionary",
}
_MUTATORS = {"setdefault", "update", "pop", "popitem", "append", "add", "extend", "insert", "clear"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text())) for p in sorted(PACKAGE.rglob("*.py"))]


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def _module_containers(tree: ast.Module) -> set[str]:
    """Names bound at module level to a mutable container (a display or a container constructor)."""
    names = set()
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        call = value.func if isinstance(value, ast.Call) else None
        called = getattr(call, "attr", None) or getattr(call, "id", None)
        if isinstance(value, ast.Dict | ast.List | ast.Set) or called in _CONTAINERS:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _mutated(tree: ast.Module, names: set[str]) -> set[str]:
    """Those of ``names`` that some function of the module writes into (a subscript store or a
    mutating method): module state that grows as the program runs."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            base = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
        ):
            base = node.func.value
        else:
            continue
        if isinstance(base, ast.Name) and base.id in names:
            found.add(base.id)
    return found


def test_no_module_level_dict_is_filled_at_run_time():
    """No module of cpplan keeps a module-level dict, list, set or weak dictionary that its functions
    fill: per-problem state goes in the problem's memo, per-card state in the resolved card."""
    offenders = []
    for name, tree in _modules():
        offenders += [f"{name}: {n}" for n in sorted(_mutated(tree, _module_containers(tree)))]
    assert offenders == []


def test_every_module_level_cache_is_bounded_and_listed():
    """Every functools cache on a module-level function is in :data:`BOUNDED_CACHES` (with its reason),
    and each is bounded: an ``lru_cache`` with a small ``maxsize``, or a ``cache`` of a function of no
    arguments."""
    found = {}
    for name, tree in _modules():
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if _decorator_name(decorator) in ("cache", "lru_cache"):
                    found[(name, node.name)] = (decorator, node)
    assert set(found) == set(BOUNDED_CACHES)
    for (name, function), (decorator, node) in found.items():
        if _decorator_name(decorator) == "cache":
            assert not node.args.args, f"{name}: {function} caches every argument it is given"
        else:
            sizes = (
                [k.value for k in decorator.keywords if k.arg == "maxsize"]
                if isinstance(decorator, ast.Call)
                else []
            )
            assert sizes and isinstance(sizes[0], ast.Constant), f"{name}: {function} has no maxsize"
            assert sizes[0].value is not None and sizes[0].value <= 8, f"{name}: {function} is too large"


def test_the_resolved_card_is_immutable_all_the_way_down():
    """A resolved card holds no mutable container: its group cards are a tuple fixed when it is
    resolved, its derived constants a frozen dataclass, its arrays read-only."""
    mutable = (dict, list, set)
    for cls in (ResolvedCard, CardConstants):
        assert cls.__dataclass_params__.frozen
        for f in dataclasses.fields(cls):
            assert not any(t.__name__ in f"{f.type}" for t in mutable), f"{cls.__name__}.{f.name}: {f.type}"


def test_a_dynamic_card_holds_its_group_cards_and_constants_as_immutable_values():
    """Resolving a dynamic-CP card resolves every group size into a tuple; no field of it or of its
    group cards is a mutable container or a writeable array, and a scaled card scales its groups."""
    card = load_model("qwen3.6-35b-a3b").resolve(cpplan.Topology(cp=2, dp=2, dynamic_cp=True), num_layers=4)
    assert [g.topology.cp for g in card.group_cards] == [1, 4]
    assert card.group_card(4) is card.group_cards[1] and card.group_card(2) is card
    for each in (card, *card.group_cards, card.constants):
        for f in dataclasses.fields(each):
            value = getattr(each, f.name)
            assert not isinstance(value, dict | list | set), f.name
            assert not isinstance(value, np.ndarray) or not value.flags.writeable, f.name
    scaled = card.scaled(2.0, 1.0)
    assert scaled.group_card(4).memory_scale == 2.0
    assert np.array_equal(scaled.group_card(4).term_bytes, card.group_card(4).term_bytes * 2.0)

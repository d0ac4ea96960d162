"""The validated, immutable planning problem: a workload under its settings, and the prefix tree."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.layout import PackedLayout, pack, share_mask
from cpplan.pricing.loss_positions import LossPositions, with_loss_spans
from cpplan.pricing.memo import PricingMemo
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.tree import PrefixTree
from cpplan.spec.card import ModelCard, ResolvedCard
from cpplan.spec.items import check_vocabulary
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.units import format_bytes
from cpplan.spec.workload import Item, Workload


def check_context(
    item: Item, max_context: int, *, source: str | None, line: int | None, field_prefix: str = ""
) -> None:
    """Raise :class:`InputError` for the first request of ``item`` longer than the model's context."""
    for k, request in enumerate(item.requests):
        if request.num_tokens > max_context:
            raise InputError(
                f"item {item.id!r} request {k} has {request.num_tokens} tokens, more than the "
                f"model's maximum context of {max_context}",
                file=source,
                line=line,
                field=f"{field_prefix}requests[{k}].tokens",
            )


class TreeSlot:
    """A problem's prefix tree once built (``None`` before)."""

    __slots__ = ("tree",)

    def __init__(self) -> None:
        self.tree: PrefixTree | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Problem:
    """Everything a planner reads. Build it with :meth:`Problem.build`; nothing writes back onto it but
    the planners' shared work, kept apart in :attr:`memo`. ``loss_positions``: every request's
    positions whose logits are needed, when some loss request has a ``loss_mask`` (``None``
    otherwise: the per-request ``request_loss`` flags are then exact)."""

    workload: Workload
    settings: Settings
    sequences: tuple[np.ndarray, ...] = field(repr=False)
    """Every tree request's tokens, in tree request order (what :attr:`tree` is built from)."""
    request_item: np.ndarray
    request_index: np.ndarray
    request_grad: np.ndarray
    request_loss: np.ndarray
    item_ptr: np.ndarray
    loss_positions: LossPositions | None = None
    chunk_tokens: int = CHUNK_TOKENS
    reorder_waves: bool = True
    """Whether a wave is priced also with its items reordered so that ranks hold whole requests (the
    solver profile's ``greedy.reorder``; :func:`~cpplan.pricing.wave.price_wave`)."""
    tree_slot: TreeSlot = field(default_factory=lambda: TreeSlot(), repr=False, compare=False)
    """Where :attr:`tree` is kept once built (a copy made with :func:`dataclasses.replace` shares it)."""
    memo: PricingMemo = field(default_factory=PricingMemo, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        workload: Workload,
        settings: Settings,
        *,
        checked: bool = False,
        tree_now: bool = True,
        reorder_waves: bool = True,
    ) -> Problem:
        """Validate the workload against the settings (every request within the model's context) and
        build the prefix tree. A wave of fewer 128-token chunks than CP ranks leaves the last ranks
        owning nothing (they still take part in the wave's key/value exchange). ``checked``: the items
        passed these checks already under the same settings (a share of a step built before), so they
        are not checked again. ``tree_now=False``: the prefix tree is built when first read, not here.
        ``reorder_waves``: :attr:`reorder_waves`."""
        requests = [request for item in workload.items for request in item.requests]
        sequences = tuple([request.tokens for request in requests])
        counts = np.fromiter(map(len, (item.requests for item in workload.items)), dtype=np.int64)
        item_ptr = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=item_ptr[1:])
        if not checked:
            _check_items(workload, sequences, item_ptr, settings)
        request_item = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        problem = cls(
            workload=workload,
            settings=settings,
            sequences=sequences,
            request_item=request_item,
            request_index=np.arange(len(requests), dtype=np.int64) - item_ptr[request_item],
            request_grad=np.array([request.grad for request in requests], dtype=bool),
            request_loss=np.array([request.output in ("loss", "logits") for request in requests], dtype=bool),
            item_ptr=item_ptr,
            loss_positions=LossPositions.of(requests),
            reorder_waves=reorder_waves,
        )
        if tree_now:
            problem.tree  # noqa: B018 (built here, inside the build's time)
        return problem

    @property
    def tree(self) -> PrefixTree:
        """The prefix tree of every request, built when first read (a step assembled from its replicas'
        plans is priced and written without it) and shared with the problem's copies."""
        if self.tree_slot.tree is None:
            self.tree_slot.tree = PrefixTree(self.sequences)
        return self.tree_slot.tree

    @property
    def topology(self) -> Topology:
        """The parallel sizes (from :attr:`settings`)."""
        return self.settings.topology

    @property
    def model(self) -> ModelCard:
        """The model card as loaded (from :attr:`settings`)."""
        return self.settings.model

    @property
    def card(self) -> ResolvedCard:
        """The card resolved for the topology, depth and phase (from :attr:`settings`)."""
        return self.settings.card

    @property
    def memory_bytes(self) -> int:
        """Bytes a wave may use on each rank, the admission limit for ``peak_bytes`` (from
        :attr:`settings`)."""
        return self.settings.memory_bytes

    @property
    def num_items(self) -> int:
        """Items in the workload."""
        return self.workload.num_items

    def item_requests(self, items) -> np.ndarray:
        """Tree request indices of the given item indices, in item order."""
        if isinstance(items, range) and items.step == 1 and len(items):  # a run of items: one range
            return np.arange(self.item_ptr[items.start], self.item_ptr[items.stop], dtype=np.int64)
        items = np.asarray(list(items) if not isinstance(items, np.ndarray) else items, dtype=np.int64)
        starts, lengths = self.item_ptr[items], self.item_ptr[items + 1] - self.item_ptr[items]
        offsets = np.cumsum(lengths) - lengths
        return np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)

    def share_mask(self, spec: str) -> np.ndarray:
        """The node mask of a layout spec (kept in :attr:`memo` per spec)."""
        masks = self.memo.share_masks
        if spec not in masks:
            masks[spec] = share_mask(self.tree, spec)
        return masks[spec]

    def pack(self, items, spec_or_mask: str | np.ndarray) -> PackedLayout:
        """Pack the requests of ``items`` under a layout spec or an explicit node mask."""
        return self.pack_requests(self.item_requests(items), spec_or_mask)

    def pack_requests(self, requests: np.ndarray, spec_or_mask: str | np.ndarray) -> PackedLayout:
        """Pack tree requests ``requests`` under a layout spec or an explicit node mask; with loss
        masks, the layout carries the tokens whose logits are needed."""
        mask = self.share_mask(spec_or_mask) if isinstance(spec_or_mask, str) else spec_or_mask
        layout = pack(self.tree, requests, mask, self.request_grad, self.request_loss)
        return with_loss_spans(layout, self.loss_positions)

    @cached_property
    def request_tokens(self) -> np.ndarray:
        """Tokens of each tree request."""
        return np.array([s.size for s in self.sequences], dtype=np.int64)

    @cached_property
    def _item_tokens(self) -> np.ndarray:
        total = np.concatenate([[0], np.cumsum(self.request_tokens)])
        return total[self.item_ptr[1:]] - total[self.item_ptr[:-1]]

    def logical_tokens(self, items) -> int:
        """Unpacked tokens of the given items."""
        return int(self._item_tokens[np.asarray(list(items), dtype=np.int64)].sum())

    @cached_property
    def _item_nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Every distinct (item, node) pair: an item and a prefix-tree node its requests pass through,
        sorted by item then node (one vectorized pass over the request paths)."""
        tree = self.tree
        items = np.repeat(self.request_item, np.diff(tree.path_ptr))
        keys = np.unique(items * tree.num_nodes + tree.path_nodes)
        return keys // tree.num_nodes, keys % tree.num_nodes

    @cached_property
    def item_full_tokens(self) -> np.ndarray:
        """Per item, its packed tokens alone under full sharing (each node of its requests once)."""
        items, nodes = self._item_nodes
        return np.bincount(items, weights=self.tree.node_length[nodes], minlength=self.num_items).astype(
            np.int64
        )

    @cached_property
    def adjacent_shared_tokens(self) -> np.ndarray:
        """Per pair of neighbouring items ``(i, i + 1)``, the tokens of the prefix-tree nodes both pass
        through: what a wave boundary between them stores twice (shape ``num_items - 1``)."""
        return self.shared_along(np.arange(self.num_items, dtype=np.int64))

    def shared_along(self, order: np.ndarray) -> np.ndarray:
        """For the items in ``order`` (a permutation), the tokens each neighbouring pair
        ``(order[k], order[k + 1])`` shares: the prefix-tree nodes both pass through."""
        items, nodes = self._item_nodes
        position = np.empty(self.num_items, dtype=np.int64)
        position[np.asarray(order, dtype=np.int64)] = np.arange(self.num_items, dtype=np.int64)
        at = position[items]
        keys = np.sort(at * self.tree.num_nodes + nodes)
        at, nodes = keys // self.tree.num_nodes, keys % self.tree.num_nodes
        earlier = keys - self.tree.num_nodes  # (k, v) as the key of (k - 1, v)
        found = np.minimum(np.searchsorted(keys, earlier), keys.size - 1)
        both = (keys[found] == earlier) & (at > 0)
        weights = self.tree.node_length[nodes[both]]
        return np.bincount(at[both] - 1, weights=weights, minlength=self.num_items - 1).astype(np.int64)

    @cached_property
    def prefix_order(self) -> np.ndarray:
        """The items ordered by their first request's path in the prefix tree (arrival order among
        equals): items that share prefixes come together, however they arrived."""
        first = self.item_ptr[:-1]
        keys = [self.tree.path(int(r)) for r in first.tolist()]
        return np.array(sorted(range(self.num_items), key=keys.__getitem__), dtype=np.int64)


def check_static_floor(card: ResolvedCard, memory_bytes: int) -> None:
    """A budget below the card's static floor (a rank owning no token) fits nothing: bad input for a
    planning call (a verifier may still be asked whether a plan fits it)."""
    e = int(np.argmax(card.envelope_static_bytes))
    floor = math.ceil(card.safety * float(card.envelope_static_bytes[e]))
    if memory_bytes < floor:
        raise InputError(
            f"budget of {memory_bytes:,} bytes ({format_bytes(memory_bytes)}) is below the static floor of "
            f"{floor:,} bytes ({format_bytes(floor)}): safety {card.safety:g} x the static bytes of "
            f"envelope {card.envelope_names[e]!r} of model {card.name!r}, before any token",
            field="memory",
        )


def _check_items(
    workload: Workload, sequences: tuple[np.ndarray, ...], item_ptr: np.ndarray, settings: Settings
) -> None:
    """Raise :class:`~cpplan.errors.InputError` for the first item of ``workload`` (whose requests' tokens
    are ``sequences``, item ``i``'s from ``item_ptr[i]``) with a request longer than the model's context
    or (token ids) an id beyond its vocabulary: every request checked with one length and one maximum,
    the error found again item by item (:func:`_check_item`) once one is seen."""
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
    bad = lengths > settings.card.max_context
    if workload.token_ids:
        vocab = settings.model.geometry.vocab
        bad |= np.array([s.size > 0 and np.maximum.reduce(s) >= vocab for s in sequences], dtype=bool)
    if bad.any():
        _check_item(workload, int(np.searchsorted(item_ptr, np.argmax(bad), side="right")) - 1, settings)
        raise AssertionError("an item failed the step's checks but not its own")  # unreachable


def _check_item(workload: Workload, i: int, settings: Settings) -> None:
    """Raise :class:`~cpplan.errors.InputError` for item ``i`` of ``workload`` when a request is longer
    than the model's context or (token ids) holds an id beyond its vocabulary."""
    item, where = workload.items[i], {"source": workload.source, "line": workload.line_of(i)}
    check_context(item, settings.card.max_context, field_prefix=f"items[{i}].", **where)
    if workload.token_ids:
        check_vocabulary(item, settings.model.geometry.vocab, field_prefix=f"items[{i}].", **where)


def group_problem(problem: Problem, size: int) -> Problem:
    """``problem`` priced for waves of CP group ``size`` (same workload, tree and pool; ``cp = size``),
    made once per problem and size; the problem itself at its own ``cp``."""
    if size == problem.topology.cp:
        return problem
    groups = problem.memo.group_problems
    if size not in groups:
        settings = dataclasses.replace(problem.settings, topology=problem.topology.group(size))
        groups[size] = dataclasses.replace(problem, settings=settings)
    return groups[size]

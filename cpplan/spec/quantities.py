"""The registry of per-rank local quantities that memory floors and cost terms are linear in.

Each :class:`Quantity` states, in data, the two facts every reader needs:

- how it is **counted** on a rank: per owned token (``token``), per owned token weighted by the keys
  it attends on its path, position + 1 (``pair``), per *piece* the rank owns (``segment``: a maximal run
  of one packed segment's tokens on the rank, which is what needs its own incoming GDN state; a rank
  owning two separate ranges of a segment holds two pieces, one contiguous range one), or per packed
  token of the wave the rank does not own (``remote``); ``only`` keeps the tokens of segments that take
  gradients (``grad``) or the tokens whose logits are needed (``loss``: some request through the token
  needs them, :meth:`~cpplan.spec.workload.Request.logits_needed`);
- how the CP-SAT model **bounds** it on one rank from above (see :data:`RANK_BOUNDS`).

Amounts travel as vectors indexed in registry order (:data:`QUANTITY_INDEX`); the evaluator, the chunk
statistics, the CP-SAT rows and the verifier loop over :data:`QUANTITIES` and dispatch on ``count`` and
``rank_bound``. Each consumer keeps one rule per kind and checks at import that it has a rule for every
kind, so a quantity whose kind has no rule fails at import. Adding a quantity of an existing kind is one
entry here plus the card terms that price it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Count = Literal["token", "pair", "segment", "remote"]
Only = Literal["all", "grad", "loss"]
RankBound = Literal["chunk_cap", "chunk_cap_or_total", "wave_total", "wave_segments", "wave_packed"]

COUNTS: tuple[Count, ...] = ("token", "pair", "segment", "remote")
"""How a quantity can be counted on a rank."""

RANK_BOUNDS: dict[RankBound, str] = {
    "chunk_cap": "128 × the rank's chunk cap (at CP1 exactly the wave's packed tokens)",
    "chunk_cap_or_total": (
        "the smaller of the chunk-cap bound and the wave's total; the chunk-cap bound itself when every "
        "request of the workload has the flag"
    ),
    "wave_total": "the wave's total (a rank may own every counted token)",
    "wave_segments": (
        "the wave's segment starts (a rank may touch every segment; with a contiguous ownership, as the "
        "model's waves are realized, a rank's pieces are the segments it touches)"
    ),
    "wave_packed": "the wave's packed tokens at CP > 1, none at CP1",
}
"""Every upper bound the joint model may put on one rank's amount of a quantity."""

_SOUND_BOUNDS: dict[Count, tuple[RankBound, ...]] = {
    "token": ("chunk_cap", "chunk_cap_or_total", "wave_total"),
    "pair": ("wave_total",),
    "segment": ("wave_segments",),
    "remote": ("wave_packed",),
}
"""The bounds that are sound for each way of counting (a pair count is not bounded by a token cap)."""


@dataclass(frozen=True, kw_only=True)
class Quantity:
    """One local quantity of a rank: its name, how it is counted and how CP-SAT bounds it."""

    name: str
    count: Count
    rank_bound: RankBound
    only: Only = "all"
    doc: str = ""

    def __post_init__(self) -> None:
        assert self.count in COUNTS, f"quantity {self.name!r}: unknown count {self.count!r}"
        assert self.rank_bound in RANK_BOUNDS, f"quantity {self.name!r}: unknown bound {self.rank_bound!r}"
        assert self.rank_bound in _SOUND_BOUNDS[self.count], (
            f"quantity {self.name!r}: {self.rank_bound!r} does not bound a {self.count!r} count"
        )
        assert self.only == "all" or self.count in ("token", "pair"), (
            f"quantity {self.name!r}: only per-token counts can be restricted to {self.only!r} tokens"
        )

    @property
    def additive(self) -> bool:
        """Whether the amount is a sum over owned tokens (so over owned chunks, and over node copies)."""
        return self.count in ("token", "pair")


QUANTITIES: tuple[Quantity, ...] = (
    Quantity(name="tokens", count="token", rank_bound="chunk_cap", doc="packed tokens the rank owns"),
    Quantity(
        name="grad_tokens",
        count="token",
        only="grad",
        rank_bound="chunk_cap_or_total",
        doc="owned tokens that gradients flow through",
    ),
    Quantity(
        name="loss_tokens",
        count="token",
        only="loss",
        rank_bound="chunk_cap_or_total",
        doc=(
            "owned tokens whose logits are needed: some request through the token reads its logits "
            "(output logits) or a loss target it predicts (output loss: every token without a "
            "loss_mask, the positions the mask's next token marks with one)"
        ),
    ),
    Quantity(
        name="segments",
        count="segment",
        rank_bound="wave_segments",
        doc="pieces the rank owns: maximal runs of one packed segment's tokens (each its own GDN state)",
    ),
    Quantity(
        name="attn_pairs",
        count="pair",
        rank_bound="wave_total",
        doc="over owned tokens, position + 1: the keys a token attends on its path",
    ),
    Quantity(
        name="grad_attn_pairs",
        count="pair",
        only="grad",
        rank_bound="wave_total",
        doc="the same over owned gradient tokens",
    ),
    Quantity(
        name="remote_tokens",
        count="remote",
        rank_bound="wave_packed",
        doc="packed tokens of the wave the rank does not own (gathered keys and values)",
    ),
)
"""Every local quantity, in the order of every quantity vector."""

QUANTITY_NAMES: tuple[str, ...] = tuple(q.name for q in QUANTITIES)
QUANTITY_INDEX: dict[str, int] = {name: i for i, name in enumerate(QUANTITY_NAMES)}
NUM_QUANTITIES = len(QUANTITIES)
SEGMENT_COLUMNS: tuple[int, ...] = tuple(QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "segment")
"""The columns of the quantities counted per piece (``count == "segment"``)."""
REMOTE_COLUMNS: tuple[int, ...] = tuple(QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "remote")
"""The columns of the quantities counted per remote token (``count == "remote"``)."""
ADDITIVE: tuple[Quantity, ...] = tuple(q for q in QUANTITIES if q.additive)
"""The quantities that sum over owned tokens, in registry order."""

assert len(QUANTITY_INDEX) == NUM_QUANTITIES, "quantity names must be unique"
assert sum(q.count == "segment" for q in QUANTITIES) <= 1, (
    "one segment count (the ownership model charges pieces to it)"
)


def quantity(name: str) -> Quantity:
    """The registry entry called ``name``."""
    return QUANTITIES[QUANTITY_INDEX[name]]


def check_rules(consumer: str, kinds: object, expected: object) -> None:
    """Fail at import when ``consumer`` has no rule for some kind of quantity (``kinds`` and
    ``expected`` are the kinds it handles and the kinds that exist)."""
    missing = set(expected) - set(kinds)  # type: ignore[call-overload]
    assert not missing, f"{consumer} has no rule for quantity kind(s) {sorted(missing)}"

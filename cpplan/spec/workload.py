"""Requests, items and workloads: the validated, immutable input of every planner."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cpplan.errors import InputError
from cpplan.spec.validation import input_error

if TYPE_CHECKING:
    from cpplan.spec.records import RecordFields

MAX_TOKEN_ID = 2**31 - 1
Output = Literal["loss", "logits", "hidden", "none"]


class Request(BaseModel):
    """One token sequence with its flags.

    ``tokens`` is stored as a read-only 1-D ``int64`` numpy array of ids in ``[0, 2**31)``.
    ``grad``: gradients are taken through it. ``output``: what the trainer reads back.
    ``loss_mask``: optional, one 0/1 per token; 1 at ``t`` means predicting token ``t`` counts in the
    loss (completion-only losses for GRPO/PPO, assistant-only masks for chat). Token 0 is never
    predicted, so its entry never counts. ``None`` (the default): every predicted token counts when
    ``output`` is ``"loss"``. Stored as a read-only ``bool`` array.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    tokens: np.ndarray
    grad: StrictBool = True
    output: Output = "loss"
    loss_mask: np.ndarray | None = None

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_array(cls, value: Any) -> np.ndarray:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise ValueError("must be a list of integer token ids")
        try:
            array = np.asarray(value)
        except ValueError:
            array = np.asarray(value, dtype=object)
        if array.ndim != 1:
            raise ValueError("must be a flat list of integer token ids")
        if array.size == 0:
            raise ValueError("must not be empty")
        if array.dtype.kind not in "iu" or (isinstance(value, list) and bool in map(type, value)):
            bad = next((i for i, t in enumerate(value) if not _is_int(t) or not 0 <= t <= MAX_TOKEN_ID), 0)
            if _is_int(value[bad]):
                raise ValueError(f"token {bad} is {value[bad]}, outside [0, {MAX_TOKEN_ID}]")
            raise ValueError(f"token {bad} is {value[bad]!r}, not an integer")
        array = array.astype(np.int64, copy=True)
        out_of_range = np.flatnonzero((array < 0) | (array > MAX_TOKEN_ID))
        if out_of_range.size:
            k = int(out_of_range[0])
            raise ValueError(f"token {k} is {int(array[k])}, outside [0, {MAX_TOKEN_ID}]")
        array.flags.writeable = False
        return array

    @field_validator("grad", mode="before")
    @classmethod
    def _grad_is_bool(cls, value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"must be a boolean (true or false), got {value!r}")
        return bool(value)

    @field_validator("loss_mask", mode="before")
    @classmethod
    def _mask_array(cls, value: Any) -> np.ndarray | None:
        if value is None:
            return None
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise ValueError("must be a list of 0/1 per token")
        array = np.asarray(value, dtype=object) if isinstance(value, Sequence) else np.asarray(value)
        if array.ndim != 1:
            raise ValueError("must be a flat list of 0/1 per token")
        bad = next((i for i, v in enumerate(array.tolist()) if v not in (0, 1) or isinstance(v, float)), None)
        if bad is not None:
            raise ValueError(f"entry {bad} is {array.tolist()[bad]!r}; every entry must be 0 or 1")
        mask = array.astype(bool)
        mask.flags.writeable = False
        return mask

    @field_validator("loss_mask")
    @classmethod
    def _mask_length(cls, mask: np.ndarray | None, info: ValidationInfo) -> np.ndarray | None:
        tokens = info.data.get("tokens")
        if mask is not None and tokens is not None and mask.size != tokens.size:
            raise ValueError(f"has {mask.size} entries for {tokens.size} tokens: give one 0/1 per token")
        return mask

    @property
    def num_tokens(self) -> int:
        """Number of tokens."""
        return int(self.tokens.size)

    def predicted(self) -> np.ndarray:
        """Per position ``t < n - 1``, whether the logits at ``t`` (predicting token ``t + 1``) count in
        the loss: the mask shifted by one, or every position without a mask; none unless ``output`` is
        ``"loss"``."""
        if self.output != "loss":
            return np.zeros(self.num_tokens - 1, dtype=bool)
        if self.loss_mask is None:
            return np.ones(self.num_tokens - 1, dtype=bool)
        return self.loss_mask[1:].copy()

    def logits_needed(self) -> np.ndarray:
        """Per token ``t``, whether the trainer needs the logits at ``t`` (what the planner prices the LM
        head on): every token for ``output == "logits"``; for ``"loss"``, the positions
        :meth:`predicted` sets when the request has a ``loss_mask`` (the head runs only where a loss
        target is read), every token when it has none (the head runs over the whole sequence);
        none for ``"hidden"`` and ``"none"``."""
        if self.output == "logits" or (self.output == "loss" and self.loss_mask is None):
            return np.ones(self.num_tokens, dtype=bool)
        needed = np.zeros(self.num_tokens, dtype=bool)
        if self.output == "loss":
            needed[:-1] = self.loss_mask[1:]
        return needed


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


class Item(BaseModel):
    """The unit placed into a wave: requests that must run together (one prompt's samples, say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    requests: tuple[Request, ...] = Field(min_length=1)

    @property
    def num_tokens(self) -> int:
        """Logical (unpacked) tokens over the item's requests."""
        return sum(r.num_tokens for r in self.requests)


class Workload(BaseModel):
    """An ordered, immutable set of items with unique ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: tuple[Item, ...] = Field(min_length=1)
    source: str | None = None
    lines: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _unique_ids(self) -> Workload:
        if self.lines is not None and len(self.lines) != len(self.items):
            raise ValueError(f"lines has {len(self.lines)} entries for {len(self.items)} items")
        seen: dict[str, int] = {}
        for index, item in enumerate(self.items):
            if item.id in seen:
                raise ValueError(f"duplicate item id {item.id!r} (items {seen[item.id]} and {index})")
            seen[item.id] = index
        return self

    @classmethod
    def from_items(cls, items: Iterable[Item], source: str | None = None) -> Workload:
        """Build a workload from items, reporting duplicates as an :class:`InputError`."""
        try:
            return cls(items=tuple(items), source=source)
        except ValidationError as exc:
            raise input_error(exc, file=source, field_in_message=True) from None

    @classmethod
    def from_jsonl(cls, path: str | Path, *, fields: RecordFields | None = None) -> Workload:
        """Read JSONL, one item a line, in any form :mod:`cpplan.spec.records` reads (``{"id",
        "requests"}``, ``{"id", "tokens"}`` or Hugging Face ``{"input_ids", ...}``); ``fields`` renames
        the id and token fields. Errors name the file, the line and the field; a Parquet file or a JSON
        array is refused with what reads it."""
        from cpplan.spec.records import DEFAULT_FIELDS, jsonl_lines, parse_item_line

        path = Path(path)
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise InputError(f"cannot read workload: {exc.strerror}", file=str(path)) from None
        items: list[Item] = []
        lines: dict[str, int] = {}
        with handle:
            _refuse_other_formats(handle.read(4), str(path))
            for entry in jsonl_lines(handle):
                if entry.text is None:
                    raise InputError(entry.error or "unreadable", file=str(path), line=entry.line)
                if not items and entry.text.lstrip().startswith("["):
                    _refuse_json_array(str(path), entry.line)
                item = parse_item_line(entry.text, str(path), entry.line, fields or DEFAULT_FIELDS)
                if item.id in lines:
                    raise InputError(
                        f"duplicate item id {item.id!r} (first on line {lines[item.id]})",
                        file=str(path),
                        line=entry.line,
                        field="id",
                    )
                lines[item.id] = entry.line
                items.append(item)
        if not items:
            raise InputError("workload is empty: no items", file=str(path))
        return cls(items=tuple(items), source=str(path), lines=tuple(lines.values()))

    @cached_property
    def index_of(self) -> dict[str, int]:
        """Item id to its index."""
        return {item.id: i for i, item in enumerate(self.items)}

    @property
    def num_items(self) -> int:
        """Number of items."""
        return len(self.items)

    @property
    def num_requests(self) -> int:
        """Number of requests over all items."""
        return sum(len(item.requests) for item in self.items)

    @property
    def num_tokens(self) -> int:
        """Logical (unpacked) tokens over all requests."""
        return sum(item.num_tokens for item in self.items)

    def requests(self) -> list[tuple[int, int, Request]]:
        """Every request as ``(item index, request index within the item, request)``."""
        return [(i, k, r) for i, item in enumerate(self.items) for k, r in enumerate(item.requests)]

    def subset(self, item_ids: Sequence[str]) -> Workload:
        """The workload restricted to ``item_ids``, in the given order."""
        picked = [self.index_of[i] for i in item_ids]
        lines = None if self.lines is None else tuple(self.lines[i] for i in picked)
        return Workload(items=tuple(self.items[i] for i in picked), source=self.source, lines=lines)

    def line_of(self, index: int) -> int | None:
        """The source line of item ``index``, when the workload was read from a file."""
        return None if self.lines is None else self.lines[index]


def _refuse_other_formats(head: bytes, source: str) -> None:
    """A Parquet file is not JSONL: say what reads it."""
    if head == b"PAR1":
        raise InputError(
            "this is a Parquet file, not JSONL (one item a line): `cpplan pack FILE ...` reads Parquet; "
            "for `cpplan plan`, write the rows as JSONL",
            file=source,
        )


def _refuse_json_array(source: str, line: int) -> None:
    """A JSON array is not JSONL: say what reads it."""
    raise InputError(
        "this is a JSON array, not JSONL (one item a line): `cpplan pack FILE ...` reads JSON arrays "
        "(ShareGPT conversations or items); for `cpplan plan`, write one item a line",
        file=source,
        line=line,
    )


def __getattr__(name: str) -> Any:
    """The record readers live in :mod:`cpplan.spec.records`; their old names here still work."""
    if name in ("parse_item_line", "item_from_record"):
        from cpplan.spec import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

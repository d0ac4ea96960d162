"""Workloads: the validated, immutable input of every planner (its requests and items are in
:mod:`cpplan.spec.items`, re-exported here), read from JSONL by :mod:`cpplan.spec.records`."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from cpplan.errors import InputError
from cpplan.spec.items import MAX_TOKEN_ID, Item, Output, Request
from cpplan.spec.records import DEFAULT_FIELDS, RecordFields, jsonl_lines, parse_item_line
from cpplan.spec.validation import InputErrors, input_error


class Workload(BaseModel, metaclass=InputErrors):
    """An ordered, immutable set of items with unique ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: tuple[Item, ...] = Field(min_length=1)
    source: str | None = None
    lines: tuple[int, ...] | None = None
    token_ids: bool = True
    """Whether the requests' tokens are the model's token ids (checked against its vocabulary);
    ``False`` where they are opaque keys only the prefix tree reads (an adapter encoding what its
    trainer can share, as :mod:`cpplan.integrations.art` does)."""

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
    def from_items(
        cls, items: Iterable[Item], source: str | None = None, *, token_ids: bool = True
    ) -> Workload:
        """Build a workload from items, reporting duplicates as an :class:`InputError` (``token_ids``:
        see :attr:`token_ids`)."""
        items = tuple(items)
        if not items:
            raise InputError("workload is empty: no items", file=source)
        try:
            return cls.model_validate({"items": items, "source": source, "token_ids": token_ids})
        except ValidationError as exc:
            raise input_error(exc, file=source, field_in_message=True) from None

    @classmethod
    def from_jsonl(cls, path: str | Path, *, fields: RecordFields | None = None) -> Workload:
        """Read JSONL, one item a line, in any form :mod:`cpplan.spec.records` reads (``{"id",
        "requests"}``, ``{"id", "tokens"}`` or Hugging Face ``{"input_ids", ...}``); ``fields`` renames
        the id and token fields. Errors name the file, the line and the field; a Parquet file or a JSON
        array is refused with what reads it. ``"-"`` reads standard input (named ``<stdin>`` in errors)."""
        path = Path(path)
        handle = _open_workload(path)
        if str(path) == "-":
            path = Path(STDIN_NAME)
        items: list[Item] = []
        lines: dict[str, int] = {}
        with handle:
            _refuse_other_formats(handle.read(4), str(path))
            for entry in jsonl_lines(handle):
                if entry.text is None:
                    raise InputError(entry.error or "unreadable", file=str(path), line=entry.line)
                if not items and entry.text.lstrip().startswith("["):
                    _refuse_json_array(str(path), entry.line)
                if not items and entry.text.strip() == "{":
                    _refuse_plan_json(handle, str(path))
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


STDIN_NAME = "<stdin>"
"""What errors call the workload read from standard input (``-``)."""


def _open_workload(path: Path) -> IO[bytes]:
    """The workload file opened for reading bytes; for ``-``, standard input read whole (the readers
    seek back over what they looked at)."""
    if str(path) == "-":
        return io.BytesIO(sys.stdin.buffer.read())
    try:
        return path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read workload: {exc.strerror}", file=str(path)) from None


def _refuse_plan_json(handle, source: str) -> None:
    """A file whose first line is a lone ``{`` is one pretty-printed JSON object, not JSONL: say so, and
    say it is a plan when it is one (``cpplan plan``'s output given where its input belongs)."""
    handle.seek(0)
    try:
        data = json.loads(handle.read())
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and "waves" in data and "cpplan_version" in data:
        raise InputError(
            "this is a cpplan plan JSON (what `cpplan plan` writes), not a workload: give the workload "
            "JSONL the plan was made from (`cpplan verify PLAN WORKLOAD` checks a plan)",
            file=source,
            line=1,
        )
    raise InputError(
        "one JSON object over several lines, not JSONL: write one item per line", file=source, line=1
    )


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
    if name == "item_from_record":
        from cpplan.spec.records import item_from_record

        return item_from_record
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_TOKEN_ID", "Item", "Output", "Request", "Workload", "parse_item_line"]

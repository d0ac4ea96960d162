"""The items of one pack window, read back from the dataset the pack was made from.

A shard line's ``pack`` object says where its window's records lie in the input (cursors before and
after the window), how they are read (format, tokenizer, field names), and which window it is. Reading
those records again, exactly as the pack did, gives the items its waves hold: what ``materialize``,
``cpplan verify`` and :class:`~cpplan.runtime.pack_dataset.PackDataset` need beside the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cpplan.errors import InputError
from cpplan.pack.readers import Cursor, file_sha256, window_records
from cpplan.pack.windows import parse_record
from cpplan.spec.records import RecordFields
from cpplan.spec.workload import Item, Workload


def window_items(dataset: Path, position: dict[str, Any]) -> dict[str, Item]:
    """Every item of the window at ``position`` (a shard line's ``pack`` object) that parses, by id (the
    first of a repeated id, as the pack kept it)."""
    try:
        fmt, tokenizer = position["format"], position.get("tokenizer")
        start, end = Cursor.from_dict(position["start"]), Cursor.from_dict(position["end"])
        fields = RecordFields.from_dict(position.get("fields"))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"not a pack position ({exc})", field="pack") from None
    items: dict[str, Item] = {}
    for record in window_records(dataset, fmt, start, end, fields=fields):
        try:
            item = parse_record(record, fmt, str(dataset), tokenizer, fields)
        except InputError:
            continue  # the pack rejected it too
        items.setdefault(item.id, item)
    return items


def window_workload(dataset: Path, position: dict[str, Any], item_ids: Sequence[str]) -> Workload:
    """A workload of the items ``item_ids`` (in that order, each once) from the window at ``position``;
    an item the dataset no longer holds there is an :class:`InputError`."""
    items = window_items(dataset, position)
    wanted = list(dict.fromkeys(item_ids))
    missing = [item_id for item_id in wanted if item_id not in items]
    if missing:
        lines = f"lines {position.get('first_line')}-{position.get('last_line')}"
        raise InputError(
            f"item {missing[0]!r} of pack window {position.get('window')} is not in {lines}: is this the "
            "dataset the pack was made from?",
            file=str(dataset),
        )
    return Workload.from_items([items[item_id] for item_id in wanted], source=str(dataset))


def check_dataset(path: Path, digest: str) -> None:
    """The dataset at ``path`` must be the bytes the pack was made from (``digest``, its SHA-256)."""
    if not path.is_file():
        raise InputError("the pack's dataset is not there: give the path where it is now", file=str(path))
    if file_sha256(path) != digest:
        raise InputError(
            "the dataset changed since it was packed (its SHA-256 differs from the manifest's): pack it "
            "again, or give the path of the bytes the pack was made from",
            file=str(path),
        )

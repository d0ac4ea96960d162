"""``PackDataset``: a finished ``cpplan pack`` folder as a torch ``IterableDataset`` of one rank's batches.

Waves are numbered over the whole pack (shard after shard, line after line). The dataset of replica
``dp_rank``'s CP rank ``cp_rank`` is GPU ``dp_rank * cp + cp_rank`` of the ``dp * cp`` pool: window by
window it yields that GPU's :class:`~cpplan.runtime.materialize.RankBatch` of every wave whose group
holds it (:func:`~cpplan.plans.plan_reader.rank_waves`: each wave on exactly one group, in the window's
schedule order; under dynamic CP a wave's group may be of another size than ``cp``), with
``batch.wave`` the wave's number in the pack. Under equal waves (a pack made for a pool of several CP
groups: the shard lines' ``padding.waves``) every window ends, for a GPU with fewer real waves than the
busiest one, with ``None`` for each of its padding waves, as :func:`~cpplan.runtime.pool.pool_waves` does:
every GPU's dataset then yields the same number of entries window by window, and a trainer runs each
``None`` as an empty wave (:func:`cpplan.hf.padding_wave`) so that FSDP's and DDP's collectives line up.
A pack without ``padding`` (``dp = 1``, equal waves off, or written before equal waves) yields real
waves only. Token ids are read again from the dataset the pack was made from (its path and SHA-256 are in
the manifest; a changed dataset is an :class:`~cpplan.errors.InputError`), window by window, as the pack
read them.

With a ``DataLoader`` use ``batch_size=None`` (a wave is already a batch); ``num_workers=N`` shares the
replica's waves (and padding entries: a ``None`` passes through ``batch_size=None`` unchanged) among the
workers and keeps their order.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.utils.data

from cpplan.errors import InputError
from cpplan.pack.outdir import read_manifest, shard_name
from cpplan.pack.window_items import check_dataset, window_items
from cpplan.plans.plan_reader import check_plan_workload, padding_waves, rank_waves
from cpplan.runtime.materialize import RankBatch, materialize
from cpplan.spec.workload import Item, Workload


class PackDataset(torch.utils.data.IterableDataset):
    """The waves of a finished pack that data-parallel replica ``dp_rank`` runs, as CP rank ``cp_rank``'s
    :class:`~cpplan.runtime.materialize.RankBatch` per wave, in wave order, each window's padding waves
    (under equal waves) as ``None`` after its real ones.

    ``dataset`` reads the token ids from another path (the pack's dataset moved); its content must be
    the same. ``len()`` is the number of entries this GPU runs, padding included (under equal waves the
    same on every GPU)."""

    def __init__(
        self, outdir: str | Path, *, dp_rank: int, cp_rank: int, dataset: str | Path | None = None
    ) -> None:
        super().__init__()
        self.outdir = Path(outdir)
        manifest = read_manifest(self.outdir)
        if not manifest["complete"]:
            raise InputError(
                "the pack is not finished: rerun the same `cpplan pack` command to complete it",
                file=str(self.outdir),
            )
        topology = manifest["config"]["topology"]
        self.dp, self.cp = int(topology["dp"]), int(topology["cp"])
        self.dp_rank = _rank(dp_rank, self.dp, "dp_rank")
        self.cp_rank = _rank(cp_rank, self.cp, "cp_rank")
        self.num_windows = int(manifest["windows"])
        self.num_waves = int(manifest["waves"])
        self.dataset = Path(dataset if dataset is not None else manifest["dataset"])
        check_dataset(self.dataset, manifest["config"]["dataset_sha256"])

    def __len__(self) -> int:
        """Entries this GPU runs: its waves and its padding waves."""
        return sum(1 for _ in self._mine())

    def __iter__(self) -> Iterator[RankBatch | None]:
        """This GPU's batch of each of its waves, ``None`` for each padding wave (this DataLoader worker's
        share of them)."""
        worker, num_workers = _worker_share()
        window_index, items = -1, {}
        for k, entry in enumerate(self._mine()):
            if k % num_workers != worker:
                continue
            if entry is None:
                yield None
                continue
            position, window, number, plan, rank = entry
            if window != window_index:
                window_index, items = window, window_items(self.dataset, plan["pack"])
            yield self._batch(plan, items, position, window, number, rank)

    def _mine(self) -> Iterator[tuple[int, int, int, dict[str, Any], int] | None]:
        """This GPU's waves in order (number in the pack, window, shard line, its plan, the wave rank),
        each window's padding waves (``None``) after its real ones."""
        pool_rank = self.dp_rank * self.cp + self.cp_rank
        first = 0
        for window, lines in self._windows():
            plans = [self._plan_line(window, number, text) for number, text in lines]
            waves = [plan["waves"][0] for plan in plans]
            for k, rank in rank_waves(waves, first=first, cp=self.cp, dp=self.dp, pool_rank=pool_rank):
                yield first + k, window, lines[k][0], plans[k], rank
            padding = padding_waves(plans[0]) if plans else []
            yield from [None] * (padding[pool_rank] if pool_rank < len(padding) else 0)
            first += len(lines)

    def _windows(self) -> Iterator[tuple[int, list[tuple[int, str]]]]:
        """Each window's wave lines (line number and text)."""
        lines: list[tuple[int, str]] = []
        current = 0
        for window, number, text in self._shard_lines():
            if window != current:
                yield current, lines
                current, lines = window, []
            lines.append((number, text))
        yield current, lines

    def _shard_lines(self) -> Iterator[tuple[int, int, str]]:
        """Every wave line of the pack in order: its window, its line number and its text."""
        for window in range(self.num_windows):
            path = self.outdir / shard_name(window)
            try:
                handle = path.open(encoding="utf-8")
            except OSError as exc:
                raise InputError(f"missing shard: {exc.strerror}", file=str(path)) from None
            with handle:
                for number, text in enumerate(handle, start=1):
                    if text.strip():
                        yield window, number, text

    def _plan_line(self, window: int, number: int, text: str) -> dict[str, Any]:
        try:
            plan = json.loads(text)
            if not isinstance(plan.get("pack"), dict):
                raise ValueError("no pack position")
        except (ValueError, AttributeError) as exc:
            path = self.outdir / shard_name(window)
            raise InputError(f"not a shard line: {exc}", file=str(path), line=number) from None
        return plan

    def _batch(
        self, plan: dict[str, Any], items: dict[str, Item], position: int, window: int, number: int, rank: int
    ) -> RankBatch:
        """Materialize one shard line's wave for wave rank ``rank``, checked against the dataset's items."""
        where = f"{self.outdir / shard_name(window)}:{number}"
        workload = _wave_workload(items, plan["waves"][0]["items"], self.dataset, where)
        check_plan_workload(plan, workload, part=True)
        batch = materialize(plan, workload, wave=0, rank=rank)
        return dataclasses.replace(batch, wave=position)


def _wave_workload(items: dict[str, Item], item_ids: list[str], dataset: Path, where: str) -> Workload:
    """The workload of one wave's items, from its window's items."""
    missing = [item_id for item_id in item_ids if item_id not in items]
    if missing:
        raise InputError(
            f"item {missing[0]!r} of the wave at {where} is not in its window of the dataset: is this the "
            "dataset the pack was made from?",
            file=str(dataset),
        )
    return Workload.from_items([items[item_id] for item_id in item_ids], source=str(dataset))


def _rank(value: Any, size: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise InputError(f"must be an integer in [0, {size}) for this pack, got {value!r}", field=field)
    return value


def _worker_share() -> tuple[int, int]:
    """This DataLoader worker's index and the number of workers (0 and 1 outside a DataLoader)."""
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


__all__ = ["PackDataset"]

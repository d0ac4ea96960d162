"""A rank's attention pieces grouped into few batched attention calls (the pure-torch kernels).

Each piece's queries attend the keys of its tree path, causal aligned bottom-right. One call per piece
is many small operations per layer (a GRPO wave of 2 prompts with 8 completions each is 18 pieces), and
on a busy CPU each small operation waits for the threads of its parallel region, so a step of many small
operations slows far more under load than one of few large ones. :func:`piece_batches` groups pieces
whose padded query x key area stays within ``slack`` of their own into one batch: queries and key paths
gathered into ``(B, max queries)`` and ``(B, max keys)`` slots, a boolean mask hiding the padding and
the keys after each query. A padded query slot sees only its piece's first key (a finite output, never
read). The index tensors are built once per wave and rank and reused by every attention layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SLACK = 1.25
"""Most padded query x key area a batch may have, over the sum of its pieces' own areas."""
MAX_BATCH_AREA = 1 << 24
"""Most query x key slots one batched call holds (its mask's elements); larger pieces run alone."""


@dataclass(frozen=True, kw_only=True, eq=False)
class PieceBatch:
    """Pieces of one rank run as one attention call. ``query_rows`` ``(B, Q)``: the local query row of
    each slot; ``key_index`` ``(B, K)``: the packed key of each slot; ``visible`` ``(B, 1, Q, K)``: which
    key each query slot sees (``None``: a single piece with as many queries as keys, plainly causal);
    ``real_slots``: the flat ``B * Q`` slots holding a real query, in the order of their rows."""

    query_rows: torch.Tensor
    key_index: torch.Tensor
    visible: torch.Tensor | None
    real_slots: torch.Tensor


@dataclass(frozen=True, kw_only=True, eq=False)
class RankPieceBatches:
    """A rank's pieces as :class:`PieceBatch` calls; ``row_order``: where each local query row sits in
    the concatenation of the batches' real slots."""

    batches: tuple[PieceBatch, ...]
    row_order: torch.Tensor


def bucket_pieces(
    num_queries: np.ndarray, num_keys: np.ndarray, *, slack: float = SLACK, max_area: int = MAX_BATCH_AREA
) -> list[list[int]]:
    """Piece indices grouped into batches, deterministically: pieces in order of keys then queries
    (most first, ties by index), each joining the open batch while the batch's padded area stays within
    ``slack`` of its pieces' own and within ``max_area``."""
    order = np.lexsort((np.arange(num_queries.size), -num_queries, -num_keys))
    groups: list[list[int]] = []
    group: list[int] = []
    most_q = most_k = own = 0
    for i in order.tolist():
        q, k = int(num_queries[i]), int(num_keys[i])
        wide_q, wide_k, wider_own = max(most_q, q), max(most_k, k), own + q * k
        padded = (len(group) + 1) * wide_q * wide_k
        if group and (padded > slack * wider_own or padded > max_area):
            groups.append(group)
            group, most_q, most_k, own = [], 0, 0, 0
            wide_q, wide_k, wider_own = q, k, q * k
        group.append(i)
        most_q, most_k, own = wide_q, wide_k, wider_own
    if group:
        groups.append(group)
    return groups


def piece_batches(geo, rank: int, device: torch.device) -> RankPieceBatches:
    """The batched calls of ``rank``'s pieces in the wave ``geo`` (a
    :class:`cpplan.hf.geometry.WaveGeometry`; key paths from its ``piece_keys``), their index tensors
    on ``device``."""
    rows_cu = geo.keys[rank].rows_cu
    paths = [geo.piece_keys(rank, i) for i in range(geo.keys[rank].num_pieces)]
    num_queries = np.diff(rows_cu)
    num_keys = np.array([path.size for path in paths], dtype=np.int64)
    batches, slots_of_rows = [], []
    for group in bucket_pieces(num_queries, num_keys):
        batch, rows = _batch(rows_cu, paths, group, num_queries, num_keys, device)
        batches.append(batch)
        slots_of_rows.append(rows)
    concatenated_rows = np.concatenate(slots_of_rows) if slots_of_rows else np.zeros(0, dtype=np.int64)
    assert concatenated_rows.size == int(rows_cu[-1]), "the pieces cover every local query row once"
    row_order = np.empty(concatenated_rows.size, dtype=np.int64)
    row_order[concatenated_rows] = np.arange(concatenated_rows.size)
    return RankPieceBatches(batches=tuple(batches), row_order=torch.as_tensor(row_order, device=device))


def _batch(rows_cu, paths, group: list[int], num_queries, num_keys, device) -> tuple[PieceBatch, np.ndarray]:
    """One batch of ``group``'s pieces, and the local rows of its real slots in slot order."""
    most_q, most_k = int(num_queries[group].max()), int(num_keys[group].max())
    query_rows = np.empty((len(group), most_q), dtype=np.int64)
    key_index = np.empty((len(group), most_k), dtype=np.int64)
    plain = len(group) == 1 and most_q == most_k  # plainly causal: no mask to build
    visible = None if plain else np.zeros((len(group), most_q, most_k), dtype=bool)
    slot, key = np.arange(most_q)[:, None], np.arange(most_k)[None, :]
    for b, i in enumerate(group):
        q, k = int(num_queries[i]), int(num_keys[i])
        first = int(rows_cu[i])
        query_rows[b] = first + np.minimum(np.arange(most_q), q - 1)
        path = paths[i]
        key_index[b] = np.concatenate([path, np.full(most_k - k, path[0], dtype=path.dtype)])
        if visible is not None:
            visible[b] = np.where(slot < q, key <= slot + (k - q), key == 0)
    real = (np.arange(most_q)[None, :] < num_queries[group][:, None]).reshape(-1)
    batch = PieceBatch(
        query_rows=torch.as_tensor(query_rows, device=device),
        key_index=torch.as_tensor(key_index, device=device),
        visible=None if visible is None else torch.as_tensor(visible[:, None], device=device),
        real_slots=torch.as_tensor(np.flatnonzero(real), device=device),
    )
    return batch, query_rows.reshape(-1)[real]


__all__ = ["MAX_BATCH_AREA", "SLACK", "PieceBatch", "RankPieceBatches", "bucket_pieces", "piece_batches"]

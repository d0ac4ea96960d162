"""Offline dataset packing: a whole dataset, window by window, to plan shards and a manifest.

``pack`` reads JSONL items, Parquet rows or JSON arrays (ShareGPT conversations, tokenized, or item
records), plans each window of items on its own with the portfolio, and writes atomic, resumable output
(see :mod:`.outdir`) whose shard lines are plans of one wave each. :mod:`.window_items` reads a window's
items back from the dataset (for ``cpplan verify`` and :class:`cpplan.PackDataset`).
"""

from cpplan.pack.conversations import ChatTokenizer, conversation_item, load_tokenizer
from cpplan.pack.outdir import MANIFEST, REJECTS, read_manifest
from cpplan.pack.pack_run import DEFAULT_WINDOW, PackOutcome, pack
from cpplan.pack.readers import Cursor, Record, detect_format, read_records
from cpplan.pack.windows import PackContext, WindowJob, WindowResult, plan_window

__all__ = [
    "DEFAULT_WINDOW",
    "MANIFEST",
    "REJECTS",
    "ChatTokenizer",
    "Cursor",
    "PackContext",
    "PackOutcome",
    "Record",
    "WindowJob",
    "WindowResult",
    "conversation_item",
    "detect_format",
    "load_tokenizer",
    "pack",
    "plan_window",
    "read_manifest",
    "read_records",
]

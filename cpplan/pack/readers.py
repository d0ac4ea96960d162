"""Streaming dataset readers: JSONL items, Parquet rows and JSON arrays (ShareGPT conversations or items).

Each reader yields :class:`Record` objects one at a time and never holds more than a read chunk (plus
one record) in memory. Every record carries the :class:`Cursor` just past it, so a packing run can
resume reading exactly where a committed window ended.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cpplan.errors import InputError
from cpplan.spec.records import DEFAULT_FIELDS, HF_TOKENS, RecordFields, jsonl_lines

Format = Literal["jsonl", "parquet", "sharegpt"]
FORMATS: tuple[str, ...] = ("jsonl", "parquet", "sharegpt")
CHUNK_BYTES = 1 << 22
MAX_RECORD_BYTES = 1 << 26
_SKIP = re.compile(r"\s*")


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """A resumable position in the input: bytes consumed, lines consumed and records read."""

    offset: int = 0
    line: int = 0
    ordinal: int = 0

    def to_dict(self) -> dict[str, int]:
        """JSON form for the manifest."""
        return {"offset": self.offset, "line": self.line, "ordinal": self.ordinal}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> Cursor:
        """Inverse of :meth:`to_dict`."""
        return cls(offset=int(data["offset"]), line=int(data["line"]), ordinal=int(data["ordinal"]))


@dataclass(frozen=True, kw_only=True)
class Record:
    """One input record: its 1-based line (row for Parquet) and ordinal, its payload, the cursor after it.

    ``payload`` is the raw line text (JSONL), a row dictionary (Parquet) or a decoded conversation
    (ShareGPT). ``error`` is set instead when the record itself could not be read.
    """

    line: int
    ordinal: int
    payload: Any
    end: Cursor
    error: str | None = None


def detect_format(path: Path) -> Format:
    """The format from the file name: ``.parquet`` / ``.pq``, ``.jsonl`` / ``.ndjson``, ``.json``."""
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".json"):
        return "sharegpt"
    raise InputError(
        "cannot tell the format from the file name; pass --format jsonl|parquet|sharegpt",
        file=str(path),
        field="format",
    )


def input_size(path: Path, fmt: Format) -> int:
    """The progress total: bytes for text formats, rows for Parquet."""
    if fmt == "parquet":
        return _parquet_file(path).metadata.num_rows
    return path.stat().st_size


def progress_position(cursor: Cursor, fmt: Format) -> int:
    """Where ``cursor`` stands on the :func:`input_size` scale."""
    return cursor.ordinal if fmt == "parquet" else cursor.offset


def read_records(
    path: Path, fmt: Format, start: Cursor | None = None, *, fields: RecordFields = DEFAULT_FIELDS
) -> Iterator[Record]:
    """Records of ``path`` from ``start`` (the beginning when ``None``); ``fields`` names the token
    column Parquet must have."""
    start = start or Cursor()
    if not path.exists():
        raise InputError("no such file", file=str(path))
    if fmt == "jsonl":
        return _jsonl(path, start)
    if fmt == "parquet":
        return _parquet(path, start, fields)
    if fmt == "sharegpt":
        return _sharegpt(path, start)
    raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", field="format")


def _jsonl(path: Path, start: Cursor) -> Iterator[Record]:
    """JSONL records through the one line reader workloads use (:func:`cpplan.spec.records.jsonl_lines`)."""
    ordinal = start.ordinal
    with path.open("rb") as handle:
        for entry in jsonl_lines(handle, offset=start.offset, line=start.line):
            ordinal += 1
            end = Cursor(offset=entry.end, line=entry.line, ordinal=ordinal)
            yield Record(line=entry.line, ordinal=ordinal, payload=entry.text, end=end, error=entry.error)


def _parquet_file(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            "reading Parquet needs pyarrow: pip install 'cpplan[parquet]'", file=str(path)
        ) from None
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types for unreadable files
        raise InputError(f"cannot read Parquet: {exc}", file=str(path)) from None


def _parquet(path: Path, start: Cursor, fields: RecordFields) -> Iterator[Record]:
    parquet = _parquet_file(path)
    names = set(parquet.schema_arrow.names)
    wanted = {fields.tokens} if fields.tokens else {"tokens", "requests", HF_TOKENS}
    if not wanted & names:
        raise InputError(
            f"Parquet needs a column of token ids ({' or '.join(sorted(wanted))}; --tokens-field names "
            f"another); found {sorted(names)}",
            file=str(path),
        )
    groups, row = _row_groups_from(parquet, start.ordinal)
    for batch in parquet.iter_batches(batch_size=1024, row_groups=groups):
        if row + batch.num_rows <= start.ordinal:
            row += batch.num_rows
            continue
        for record in batch.to_pylist():
            row += 1
            if row <= start.ordinal:
                continue
            data = {k: v for k, v in record.items() if v is not None}
            end = Cursor(offset=0, line=row, ordinal=row)
            yield Record(line=row, ordinal=row, payload=data, end=end)


def _row_groups_from(parquet, first_row: int) -> tuple[list[int], int]:
    """The row groups holding rows after ``first_row`` (so a resumed read skips the others unread) and
    the number of rows before them."""
    sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.metadata.num_row_groups)]
    before, group = 0, 0
    while group < len(sizes) and before + sizes[group] <= first_row:
        before += sizes[group]
        group += 1
    return list(range(group, len(sizes))), before


class _TextStream:
    """A UTF-8 file as a growing string buffer with byte and line accounting of what was consumed.

    ``read(size)`` gives the next chunk: bytes (decoded here) or text (a file opened in text mode)."""

    def __init__(self, read: Callable[[int], bytes | str], start: Cursor, chunk: int = CHUNK_BYTES) -> None:
        self.read = read
        self.chunk = chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buffer = ""
        self.pos = 0
        self.offset = start.offset
        self.line = start.line
        self.eof = False

    def more(self) -> bool:
        """Read another chunk; ``False`` at end of file."""
        if self.eof:
            return False
        chunk = self.read(self.chunk)
        if not chunk:
            self.eof = True
            self.buffer += self.decoder.decode(b"", final=True)
            return False
        self.buffer += chunk if isinstance(chunk, str) else self.decoder.decode(chunk)
        return True

    def consume(self, end: int) -> None:
        """Mark the text up to ``end`` as read and account its bytes and lines."""
        text = self.buffer[self.pos : end]
        self.offset += len(text.encode("utf-8"))
        self.line += text.count("\n")
        self.pos = end
        if self.pos > self.chunk:
            self.buffer = self.buffer[self.pos :]
            self.pos = 0

    def skip_space(self) -> str | None:
        """Skip whitespace; the next character, or ``None`` at end of file."""
        while True:
            end = _SKIP.match(self.buffer, self.pos).end()
            self.consume(end)
            if self.pos < len(self.buffer):
                return self.buffer[self.pos]
            if not self.more():
                return None


def _sharegpt(path: Path, start: Cursor) -> Iterator[Record]:
    with path.open("rb") as handle:
        handle.seek(start.offset)
        yield from _array_records(_TextStream(handle.read, start), start, str(path))


def iter_json_array(
    read: Callable[[int], bytes | str],
    block_chars: int = CHUNK_BYTES,
    *,
    source: str = "JSON array",
    on_truncated: Callable[[int, str], None] | None = None,
) -> Iterator[Any]:
    """The values of a JSON array read incrementally through ``read`` (a file's ``read``, binary or
    text): the whole array is never held in memory. Errors are :class:`InputError` naming ``source``;
    with ``on_truncated``, a file that ends inside a value (a download cut short) instead calls
    ``on_truncated(values read, reason)`` and ends the iteration there."""
    for record in _array_records(_TextStream(read, Cursor(), block_chars), Cursor(), source):
        if record.error is not None:
            if on_truncated is not None and record.error.startswith("truncated"):
                on_truncated(record.ordinal - 1, record.error)
                return
            raise InputError(record.error, file=source, line=record.line)
        yield record.payload


def _array_records(stream: _TextStream, start: Cursor, source: str) -> Iterator[Record]:
    """The values of the JSON array on ``stream`` from ``start`` (its opening ``[`` when at offset 0)."""
    decoder = json.JSONDecoder()
    ordinal = start.ordinal
    if start.offset == 0:
        _open_array(stream, source)
    while True:
        head = stream.skip_space()
        if head is None:
            if ordinal:
                return
            raise InputError("the JSON array is never closed", file=source, line=stream.line + 1)
        if head == "]":
            return
        if head == "," and ordinal:
            stream.consume(stream.pos + 1)
            head = stream.skip_space()
        line = stream.line + 1
        ordinal += 1
        value, error = _decode_next(stream, decoder)
        end = Cursor(offset=stream.offset, line=stream.line, ordinal=ordinal)
        if error is not None:
            if error.startswith("truncated"):
                error += f"; the file ends inside record {ordinal:,}, the {ordinal - 1:,} before it were read"
            yield Record(line=line, ordinal=ordinal, payload=None, end=end, error=error)
            if error.startswith("truncated"):
                return
            continue
        yield Record(line=line, ordinal=ordinal, payload=value, end=end)


def _open_array(stream: _TextStream, source: str) -> None:
    """Consume an optional byte-order mark and the array's opening ``[``."""
    head = stream.skip_space()
    if head == "\ufeff":
        stream.consume(stream.pos + 1)
        head = stream.skip_space()
    if head != "[":
        raise InputError(
            "expected a JSON array of ShareGPT conversations or items ('[' at the start)",
            file=source,
            line=stream.line + 1,
        )
    stream.consume(stream.pos + 1)


def _decode_next(stream: _TextStream, decoder: json.JSONDecoder) -> tuple[Any, str | None]:
    """Decode the value at the stream position, reading more while it is cut by the buffer's end.

    A value the parser rejects for any reason is reported and skipped when its end can be found (the
    brackets balance); one that runs to the end of the file is reported as truncated, and the reader
    stops there."""
    while True:
        try:
            value, end = decoder.raw_decode(stream.buffer, stream.pos)
        except json.JSONDecodeError as exc:
            if len(stream.buffer) - stream.pos <= MAX_RECORD_BYTES and stream.more():
                continue
            return None, _skip_bad_value(stream, f"{exc.msg} (record not complete JSON)")
        except RecursionError:
            return None, _skip_bad_value(stream, "nested too deeply to read")
        except ValueError as exc:  # an integer of more digits than Python converts, say
            return None, _skip_bad_value(stream, str(exc).split(";")[0])
        stream.consume(end)
        return value, None


def _skip_bad_value(stream: _TextStream, reason: str) -> str:
    """Consume the bad value at the stream position (to its balanced end, else to the end of the file)
    and return the reject reason."""
    while True:
        end = value_end(stream.buffer, stream.pos)
        if end is not None:
            stream.consume(end)
            return f"malformed: {reason}"
        if len(stream.buffer) - stream.pos > MAX_RECORD_BYTES or not stream.more():
            stream.consume(len(stream.buffer))
            stream.eof = True
            return f"truncated at end of file: {reason}"


def value_end(text: str, pos: int) -> int | None:
    """Where the JSON object or array starting at ``text[pos]`` ends (strings and escapes respected),
    or ``None`` when its brackets do not close within ``text``."""
    if pos >= len(text) or text[pos] not in "[{":
        match = _SCALAR_END.search(text, pos)
        return None if match is None else match.start()
    depth, index = 0, pos
    while True:
        match = _STRUCTURE.search(text, index)
        if match is None:
            return None
        char = match.group()
        if char[0] == '"':
            index = match.end()
            continue
        depth += 1 if char in "[{" else -1
        index = match.end()
        if depth == 0:
            return index


_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_SCALAR_END = re.compile(r"[,\]]")


def window_records(
    path: Path, fmt: Format, start: Cursor, end: Cursor, *, fields: RecordFields = DEFAULT_FIELDS
) -> Iterator[Record]:
    """The records between two cursors of a pack (a window's ``start`` and ``end``)."""
    for record in read_records(path, fmt, start, fields=fields):
        if record.ordinal > end.ordinal:
            return
        yield record


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (the last few kept per path, size and modification time)."""
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)  # bounded: a pack run hashes its one dataset once per window
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            hasher.update(block)
    return hasher.hexdigest()

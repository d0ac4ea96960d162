"""Streaming dataset readers: JSONL items, Parquet rows and ShareGPT conversation JSON (any JSON array).

Each reader yields :class:`Record` objects one at a time and never holds more than a read chunk (plus
one record) in memory. Every record carries the :class:`Cursor` just past it, so a packing run can
resume reading exactly where a committed window ended.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cpplan.errors import InputError

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


def read_records(path: Path, fmt: Format, start: Cursor | None = None) -> Iterator[Record]:
    """Records of ``path`` from ``start`` (the beginning when ``None``)."""
    start = start or Cursor()
    if not path.exists():
        raise InputError("no such file", file=str(path))
    if fmt == "jsonl":
        return _jsonl(path, start)
    if fmt == "parquet":
        return _parquet(path, start)
    if fmt == "sharegpt":
        return _sharegpt(path, start)
    raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", field="format")


def _jsonl(path: Path, start: Cursor) -> Iterator[Record]:
    offset, line, ordinal = start.offset, start.line, start.ordinal
    with path.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            offset += len(raw)
            line += 1
            if not raw.strip():
                continue
            ordinal += 1
            end = Cursor(offset=offset, line=line, ordinal=ordinal)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Record(line=line, ordinal=ordinal, payload=None, end=end, error=f"not UTF-8: {exc}")
                continue
            yield Record(line=line, ordinal=ordinal, payload=text, end=end)


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


def _parquet(path: Path, start: Cursor) -> Iterator[Record]:
    parquet = _parquet_file(path)
    names = set(parquet.schema_arrow.names)
    if "id" not in names or not ({"tokens", "requests"} & names):
        raise InputError(
            f"Parquet needs an 'id' column and a 'tokens' or 'requests' column; found {sorted(names)}",
            file=str(path),
        )
    row = 0
    for batch in parquet.iter_batches(batch_size=1024):
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
    read: Callable[[int], bytes | str], block_chars: int = CHUNK_BYTES, *, source: str = "JSON array"
) -> Iterator[Any]:
    """The values of a JSON array read incrementally through ``read`` (a file's ``read``, binary or
    text): the whole array is never held in memory. Errors are :class:`InputError` naming ``source``."""
    for record in _array_records(_TextStream(read, Cursor(), block_chars), Cursor(), source):
        if record.error is not None:
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
            yield Record(line=line, ordinal=ordinal, payload=None, end=end, error=error)
            return
        yield Record(line=line, ordinal=ordinal, payload=value, end=end)


def _open_array(stream: _TextStream, source: str) -> None:
    """Consume an optional byte-order mark and the array's opening ``[``."""
    head = stream.skip_space()
    if head == "\ufeff":
        stream.consume(stream.pos + 1)
        head = stream.skip_space()
    if head != "[":
        raise InputError(
            "expected a JSON array of conversations ('[' at the start)",
            file=source,
            line=stream.line + 1,
        )
    stream.consume(stream.pos + 1)


def _decode_next(stream: _TextStream, decoder: json.JSONDecoder) -> tuple[Any, str | None]:
    """Decode the value at the stream position, reading more while it is cut by the buffer's end.

    A value that still fails at end of file is reported (the array cannot be resynchronized after
    it, so the reader stops there)."""
    while True:
        try:
            value, end = decoder.raw_decode(stream.buffer, stream.pos)
        except json.JSONDecodeError as exc:
            if len(stream.buffer) - stream.pos > MAX_RECORD_BYTES or not stream.more():
                where = "truncated at end of file" if stream.eof else "malformed"
                stream.consume(len(stream.buffer))
                return None, f"{where}: {exc.msg} (record not complete JSON)"
            continue
        stream.consume(end)
        return value, None

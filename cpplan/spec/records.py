"""Workload records: the one JSONL line reader, and the JSON forms an item can take.

Forms of a record (a JSONL line, a Parquet row, an element of a JSON array):

- ``{"id", "requests": [{"tokens", "grad", "output", "loss_mask"}, ...]}``: an item of several requests;
- ``{"id", "tokens", ...}``: a one-request item (the request's fields beside the id);
- ``{"input_ids", "id"?, "loss_mask"?, "labels"?, "attention_mask"?, ...}`` (Hugging Face style): a
  one-request item. ``labels`` use -100 for positions that do not count (``labels[t] != -100`` is
  ``loss_mask[t] = 1``) and otherwise repeat ``input_ids[t]``; other fields are ignored; without an id
  the line number (Parquet: the row number) becomes the id.

:class:`RecordFields` renames the id and token fields (``--id-field``, ``--tokens-field``; a renamed
token field is read in the Hugging Face form).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any

import numpy as np
from pydantic import ValidationError

from cpplan.errors import InputError
from cpplan.spec.items import Item, Request
from cpplan.spec.validation import input_error

HF_TOKENS = "input_ids"
IGNORE_INDEX = -100


@dataclass(frozen=True, kw_only=True)
class RecordFields:
    """The fields a record keeps its id and its token ids in (``--id-field``, ``--tokens-field``).

    ``tokens=None`` reads ``requests``, ``tokens`` or ``input_ids``; a name reads that field in the
    Hugging Face form (``loss_mask`` / ``labels`` beside it, other fields ignored)."""

    id: str = "id"
    tokens: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        """JSON form (for a pack's configuration)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RecordFields:
        """Inverse of :meth:`to_dict` (``None``: the default fields)."""
        return cls(**data) if data else cls()


DEFAULT_FIELDS = RecordFields()


@dataclass(frozen=True, kw_only=True)
class JsonlLine:
    """One non-blank line of a JSONL file: its 1-based number, the byte offset just past it, and its text
    (``None`` with ``error`` set when it is not UTF-8)."""

    line: int
    end: int
    text: str | None
    error: str | None = None


def jsonl_lines(handle: IO[bytes], *, offset: int = 0, line: int = 0) -> Iterator[JsonlLine]:
    """The non-blank lines of a binary JSONL file from byte ``offset`` (after ``line`` lines). A UTF-8
    byte-order mark at the start of the file is dropped; a line that is not UTF-8 comes with an error."""
    handle.seek(offset)
    for raw in handle:
        at_start = offset == 0
        offset += len(raw)
        line += 1
        if not raw.strip() or (at_start and raw.strip() == b"\xef\xbb\xbf"):
            continue
        try:
            text = raw.decode("utf-8-sig" if at_start else "utf-8")
        except UnicodeDecodeError as exc:
            error = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
            yield JsonlLine(line=line, end=offset, text=None, error=error)
            continue
        yield JsonlLine(line=line, end=offset, text=text)


def decode_json(text: str, source: str, line: int) -> Any:
    """``json.loads`` where anything the parser rejects (syntax, a number with too many digits, nesting
    too deep) is an :class:`InputError` naming the file and the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", file=source, line=line) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply to read", file=source, line=line) from None
    except ValueError as exc:  # for example an integer of more digits than Python converts
        reason = str(exc).split(";")[0]
        raise InputError(f"malformed JSON: {reason}", file=source, line=line) from None


def parse_item_line(raw: str, source: str, line_no: int, fields: RecordFields = DEFAULT_FIELDS) -> Item:
    """One JSONL line to an :class:`Item`, or an :class:`InputError` naming file, line and field."""
    record = decode_json(raw, source, line_no)
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", file=source, line=line_no)
    return item_from_record(record, source, line_no, fields)


def item_from_record(
    record: dict[str, Any], source: str, line_no: int, fields: RecordFields = DEFAULT_FIELDS
) -> Item:
    """A decoded record in any of the module's forms to an :class:`Item`."""
    if fields.tokens is not None or (HF_TOKENS in record and not {"tokens", "requests"} & set(record)):
        return _hf_item(record, source, line_no, fields)
    record = dict(record)
    if HF_TOKENS in record:
        raise InputError(
            "give one of 'tokens', 'requests' or 'input_ids'", file=source, line=line_no, field=HF_TOKENS
        )
    if fields.id != "id":
        record["id"] = _item_id(record, fields.id, source, line_no, field=fields.id, default=None)
        del record[fields.id]
    _check_native_id(record, source, line_no)
    if "tokens" in record:
        if "requests" in record:
            raise InputError(
                "give either 'tokens' or 'requests', not both", file=source, line=line_no, field="tokens"
            )
        single = {k: record.pop(k) for k in ("tokens", "grad", "output", "loss_mask") if k in record}
        record["requests"] = [single]
    elif "requests" not in record:
        raise InputError(
            "missing: give 'requests', 'tokens' or 'input_ids' (--tokens-field NAME reads the token ids "
            f"from another field; this record has {_keys(record)})",
            file=source,
            line=line_no,
            field="requests",
        )
    try:
        return Item.model_validate(record)
    except ValidationError as exc:
        raise _item_error(exc, record, source, line_no) from None


def _item_error(exc: ValidationError, record: dict[str, Any], source: str, line_no: int) -> InputError:
    """The first validation error of an item record; a loss mask's names the item and the request."""
    error = input_error(exc, file=source, line=line_no)
    loc = exc.errors()[0]["loc"]
    if len(loc) == 3 and loc[0] == "requests" and loc[2] == "loss_mask":
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        return InputError(
            f"item {record['id']!r} request {loc[1]}: {message}", file=source, line=line_no, field=error.field
        )
    return error


def _check_native_id(record: dict[str, Any], source: str, line_no: int) -> None:
    """The id of a record in the ``tokens`` or ``requests`` form, made a string."""
    if "id" not in record:
        if "waves" in record and "cpplan_version" in record:
            raise InputError(
                "this line is a cpplan plan JSON (what `cpplan plan` writes), not a workload item",
                file=source,
                line=line_no,
            )
        raise InputError(
            "missing (only records in the input_ids form may leave it out; --id-field NAME reads the id "
            f"from another field; this record has {_keys(record)})",
            file=source,
            line=line_no,
            field="id",
        )
    record["id"] = _item_id(record, "id", source, line_no, field="id", default=None)


def _keys(record: dict[str, Any]) -> str:
    """The record's fields, for an error (at most eight named)."""
    names = [repr(k) for k in list(record)[:8]]
    more = f" and {len(record) - 8} more" if len(record) > 8 else ""
    return ("fields " + ", ".join(names) + more) if names else "no fields"


def _item_id(
    record: dict[str, Any], key: str, source: str, line_no: int, *, field: str, default: str | None
) -> str:
    """A record's id, at ``key`` (named ``field`` in errors): a non-empty string, or an integer written in
    decimal; ``default`` when the record has no ``key`` (refused as missing when ``default`` is
    ``None``)."""
    if key not in record:
        if default is not None:
            return default
        raise InputError(
            f"missing (--id-field NAME reads the id from another field; this record has {_keys(record)})",
            file=source,
            line=line_no,
            field=field,
        )
    value = record[key]
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str) and value:
        return value
    raise InputError(
        f"must be a non-empty string or an integer, got {value!r}", file=source, line=line_no, field=field
    )


def _hf_item(record: dict[str, Any], source: str, line_no: int, fields: RecordFields) -> Item:
    """A record in the Hugging Face form: token ids, an optional id, mask and labels."""
    key = fields.tokens or HF_TOKENS
    if key not in record:
        raise InputError(
            f"missing (--tokens-field NAME reads the token ids from another field; this record has "
            f"{_keys(record)})",
            file=source,
            line=line_no,
            field=key,
        )
    item_id = _item_id(record, fields.id, source, line_no, field=fields.id, default=str(line_no))
    tokens = _validated(lambda: Request(tokens=record[key]).tokens, source, line_no, key)
    _check_unpadded(record.get("attention_mask"), tokens.size, source, line_no)
    mask, mask_field = _hf_loss_mask(record, tokens, source, line_no)
    request = _validated(lambda: Request(tokens=tokens, loss_mask=mask), source, line_no, mask_field)
    return Item(id=item_id, requests=(request,))


def _validated(build, source: str, line_no: int, field: str):
    """``build()``, with a validation error reported on ``field`` of the record."""
    try:
        return build()
    except InputError as error:  # a Request built by hand raises InputError (spec.validation.InputErrors)
        raise InputError(str(error).split(": ", 1)[-1], file=source, line=line_no, field=field) from None


def _int_column(value: Any, size: int, source: str, line_no: int, field: str) -> np.ndarray:
    """A flat list of ``size`` integers as an array, or an :class:`InputError` naming ``field``."""
    ok = isinstance(value, list | tuple | np.ndarray) and not any(isinstance(v, bool | float) for v in value)
    array = np.asarray(value) if ok else np.zeros(0)
    if not ok or array.ndim != 1 or array.dtype.kind not in "iu" or array.size != size:
        raise InputError(
            f"must be a flat list of {size} integers (one per token)", file=source, line=line_no, field=field
        )
    return array


def _check_unpadded(attention: Any, size: int, source: str, line_no: int) -> None:
    """An ``attention_mask`` must mark every token: cpplan packs sequences without padding."""
    if attention is None:
        return
    array = _int_column(attention, size, source, line_no, "attention_mask")
    padded = np.flatnonzero(array != 1)
    if padded.size:
        raise InputError(
            f"is {int(array[padded[0]])} at position {int(padded[0])}: cpplan packs sequences without "
            "padding; remove the padding (and the attention_mask)",
            file=source,
            line=line_no,
            field="attention_mask",
        )


def _hf_loss_mask(record: dict[str, Any], tokens: np.ndarray, source: str, line_no: int) -> tuple[Any, str]:
    """The loss mask of a Hugging Face record (from ``loss_mask``, ``labels`` or both, which must agree)
    and the field it came from."""
    mask = record.get("loss_mask")
    labels = record.get("labels")
    if labels is None:
        return mask, "loss_mask"
    array = _int_column(labels, tokens.size, source, line_no, "labels")
    counted = array != IGNORE_INDEX
    wrong = np.flatnonzero(counted & (array != tokens))
    if wrong.size:
        t = int(wrong[0])
        raise InputError(
            f"labels[{t}] is {int(array[t])} but input_ids[{t}] is {int(tokens[t])}: labels must repeat "
            f"input_ids (unshifted) or be {IGNORE_INDEX}",
            file=source,
            line=line_no,
            field="labels",
        )
    if mask is not None:
        given = _int_column(mask, tokens.size, source, line_no, "loss_mask")
        differ = np.flatnonzero((given != 0) != counted)
        if differ.size:
            t = int(differ[0])
            raise InputError(
                f"loss_mask[{t}] is {int(given[t])} but labels[{t}] is {int(array[t])}: they must agree "
                f"(labels[t] != {IGNORE_INDEX} exactly where loss_mask[t] = 1)",
                file=source,
                line=line_no,
                field="loss_mask",
            )
    return counted.astype(np.int64).tolist(), "labels"

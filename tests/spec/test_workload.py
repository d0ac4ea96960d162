"""Workload types and the JSONL reader."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cpplan import InputError, Workload
from cpplan.spec.records import RecordFields, item_from_record, jsonl_lines
from cpplan.spec.workload import Item, Request, parse_item_line


def write(tmp_path, lines: list[str]):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reads_both_item_forms(tmp_path):
    """Both contract forms parse: a requests list (grad defaults true) and a one-request tokens item."""
    path = write(
        tmp_path,
        [
            json.dumps({"id": "a", "requests": [{"tokens": [1, 2, 3]}, {"tokens": [1, 2], "grad": False}]}),
            json.dumps({"id": "b", "tokens": [5, 6]}),
        ],
    )
    wl = Workload.from_jsonl(path)
    assert [i.id for i in wl.items] == ["a", "b"]
    assert wl.items[0].requests[0].grad is True and wl.items[0].requests[1].grad is False
    assert wl.items[1].requests[0].tokens.tolist() == [5, 6]
    assert wl.num_requests == 3 and wl.num_tokens == 7


def test_tokens_are_immutable_int64():
    """Request tokens are a read-only int64 array: nothing can write answers back onto the input."""
    r = Request(tokens=[1, 2, 3])
    assert r.tokens.dtype == np.int64
    with pytest.raises(ValueError):
        r.tokens[0] = 9


@pytest.mark.parametrize(
    ("line", "field", "needle"),
    [
        ('{"id": "a", "tokens": []}', "requests.0.tokens", "empty"),
        ('{"id": "a", "tokens": [1, -2]}', "requests.0.tokens", "outside"),
        ('{"id": "a", "tokens": [1, 2.5]}', "requests.0.tokens", "not an integer"),
        ('{"id": "a", "tokens": [1, 2147483648]}', "requests.0.tokens", "outside"),
        ('{"id": "a", "requests": []}', "requests", "must not be empty"),
        ('{"tokens": [1]}', "id", "missing"),
        ('{"id": 3.5, "tokens": [1]}', "id", "a non-empty string or an integer"),
        ('{"id": true, "tokens": [1]}', "id", "a non-empty string or an integer"),
        ('{"id": "a", "requests": [{"tokens": [1], "grad": "yes"}]}', "requests.0.grad", "bool"),
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path, line, field, needle):
    """Each malformed item is refused with an error naming the file, the line and the field."""
    path = write(tmp_path, ['{"id": "ok", "tokens": [1]}', line])
    with pytest.raises(InputError) as info:
        Workload.from_jsonl(path)
    message = str(info.value)
    assert f"{path}:2" in message and field in message and needle in message.lower()
    assert info.value.line == 2


def test_malformed_json_line(tmp_path):
    """A line that is not JSON is reported with its line number."""
    path = write(tmp_path, ['{"id": "a", "tokens": [1]}', '{"id": "b", "tokens": [1,'])
    with pytest.raises(InputError, match=r"w.jsonl:2: malformed JSON"):
        Workload.from_jsonl(path)


def test_duplicate_ids_and_empty_file(tmp_path):
    """Duplicate item ids name both lines; an empty file is refused."""
    path = write(tmp_path, ['{"id": "a", "tokens": [1]}', '{"id": "a", "tokens": [2]}'])
    with pytest.raises(InputError, match=r"duplicate item id 'a' .first on line 1"):
        Workload.from_jsonl(path)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="empty"):
        Workload.from_jsonl(empty)


def test_loss_mask_is_one_bool_per_token_and_predicted_shifts_it():
    """A loss mask is stored as read-only booleans; predicted() is the mask shifted by one (token 0 never
    counts), every position without a mask, and none unless the output is the loss."""
    masked = Request(tokens=[5, 6, 7, 8], loss_mask=[1, 0, 1, 1])
    assert masked.loss_mask.dtype == bool and not masked.loss_mask.flags.writeable
    assert masked.predicted().tolist() == [False, True, True]
    assert Request(tokens=[5, 6, 7]).predicted().tolist() == [True, True]
    assert Request(tokens=[5, 6, 7], output="hidden", loss_mask=[0, 1, 1]).predicted().tolist() == [
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ("[0, 2, 1]", "entry 1 is 2; every entry must be 0 or 1"),
        ("[0, 0.5, 1]", "entry 1 is 0.5"),
        ("[0, 1]", "has 2 entries for 3 tokens"),
        ('"011"', "must be a list of 0/1 per token"),
    ],
)
def test_bad_loss_mask_names_line_request_and_field(mask, message):
    """A loss mask of the wrong length or with values other than 0/1 is refused naming the file, the line,
    the request and the field."""
    line = (
        '{"id": "a", "requests": [{"tokens": [1, 2, 3]}, {"tokens": [1, 2, 3], "loss_mask": ' + mask + "}]}"
    )
    with pytest.raises(
        InputError, match=r"w\.jsonl:7, field 'requests\.1\.loss_mask': .*" + re.escape(message)
    ):
        parse_item_line(line, "w.jsonl", 7)


def test_hugging_face_records_without_ids_take_their_line_number(tmp_path):
    """`{"input_ids", "labels"}` lines without an id are items whose id is their line number; labels of
    -100 are positions that do not count (loss_mask 0), other labels repeat the input ids; extra
    columns are ignored."""
    path = write(
        tmp_path,
        [
            json.dumps({"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8], "text": "ignored"}),
            "",
            json.dumps({"input_ids": [5, 6, 9], "attention_mask": [1, 1, 1]}),
            json.dumps({"input_ids": [1, 2], "loss_mask": [0, 1], "labels": [-100, 2], "id": 17}),
        ],
    )
    wl = Workload.from_jsonl(path)
    assert [item.id for item in wl.items] == ["1", "3", "17"]
    first = wl.items[0].requests[0]
    assert first.loss_mask.tolist() == [False, False, True, True]
    assert first.predicted().tolist() == [False, True, True]
    assert wl.items[1].requests[0].loss_mask is None
    assert wl.items[2].requests[0].loss_mask.tolist() == [False, True]


def test_fields_can_be_mapped():
    """`--tokens-field` reads the token ids (Hugging Face form) from another field and `--id-field` the
    id, which may be an integer; the native forms take a mapped id too."""
    fields = RecordFields(tokens="ids", id="uid")
    item = item_from_record({"uid": 4, "ids": [3, 4], "labels": [-100, 4]}, "x", 9, fields)
    assert item.id == "4" and item.requests[0].tokens.tolist() == [3, 4]
    assert item.requests[0].loss_mask.tolist() == [False, True]
    native = item_from_record({"uid": "a", "tokens": [1]}, "x", 9, RecordFields(id="uid"))
    assert native.id == "a"
    with pytest.raises(InputError, match=r"x:9, field 'ids': missing"):
        item_from_record({"input_ids": [1]}, "x", 9, fields)


def test_an_integer_id_is_read_in_every_form(tmp_path):
    """An integer id is the item's id written in decimal in every record form, with or without
    `--id-field id`: `{"id": 1, "tokens"}` as `{"id": 1, "input_ids"}` and `{"id": 1, "requests"}`."""
    lines = [
        '{"id": 1, "tokens": [1, 2]}',
        '{"id": 2, "input_ids": [3]}',
        '{"id": 3, "requests": [{"tokens": [4]}]}',
    ]
    path = write(tmp_path, lines)
    for fields in (None, RecordFields(id="id")):
        assert [item.id for item in Workload.from_jsonl(path, fields=fields).items] == ["1", "2", "3"]
    with pytest.raises(InputError, match=r":2, field 'id': duplicate item id '1'"):
        Workload.from_jsonl(write(tmp_path, ['{"id": 1, "tokens": [1]}', '{"id": "1", "tokens": [2]}']))


def test_a_mapped_id_field_the_record_lacks_is_missing():
    """`--id-field foo` on a record without `foo` is refused as missing, naming the fields the record
    has (never "got None"), and the record's own `id` is not read in its place."""
    with pytest.raises(InputError, match=r"x:9, field 'foo': missing .*fields 'id', 'tokens'"):
        item_from_record({"id": "a", "tokens": [1]}, "x", 9, RecordFields(id="foo"))
    with pytest.raises(InputError, match=r"field 'foo': must be a non-empty string or an integer, got None"):
        item_from_record({"foo": None, "tokens": [1]}, "x", 9, RecordFields(id="foo"))


def test_token_ids_from_torch_and_numpy_alike():
    """A torch tensor of ids (and a loss mask as a tensor) is taken as a numpy array or a list is; a
    float tensor is refused as a float array is, naming the token."""
    torch = pytest.importorskip("torch")
    from_torch = Request(tokens=torch.arange(5), loss_mask=torch.tensor([0, 0, 1, 1, 1]))
    from_numpy = Request(tokens=np.arange(5), loss_mask=np.array([0, 0, 1, 1, 1]))
    assert from_torch.tokens.tolist() == from_numpy.tokens.tolist() == [0, 1, 2, 3, 4]
    assert from_torch.loss_mask.tolist() == from_numpy.loss_mask.tolist()
    for floats in (torch.tensor([1.0, 2.5]), np.array([1.0, 2.5])):
        with pytest.raises(InputError, match=r"field 'tokens': token 0 is 1.0, not an integer"):
            Request(tokens=floats)


def test_empty_lists_are_said_in_the_projects_words():
    """An item without requests and a workload without items are refused as "must not be empty" (or, from
    Workload.from_items, as an empty workload), not with pydantic's wording."""
    for build, needle in (
        (lambda: Item(id="a", requests=()), "field 'requests': must not be empty"),
        (lambda: Workload(items=()), "field 'items': must not be empty"),
        (lambda: Workload.from_items([], source="w.jsonl"), "w.jsonl: workload is empty: no items"),
        (lambda: Item(id="", requests=(Request(tokens=[1]),)), "field 'id': must not be empty"),
    ):
        with pytest.raises(InputError) as info:
            build()
        assert str(info.value) == needle
        assert "pydantic" not in str(info.value) and "Tuple" not in str(info.value)


def test_a_dash_reads_standard_input(monkeypatch):
    """`Workload.from_jsonl("-")` reads the workload from standard input, and names it <stdin> in errors."""
    import io
    import sys

    text = b'{"id": "a", "tokens": [1, 2]}\n{"id": "b", "tokens": []}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text[:30])))
    assert [item.id for item in Workload.from_jsonl("-").items] == ["a"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    with pytest.raises(InputError, match=r"^<stdin>:2, field 'requests.0.tokens'"):
        Workload.from_jsonl("-")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"id": "a", "tokens": [' + "9" * 5000 + "]}", "malformed JSON: Exceeds the limit"),
        ("[" * 50_000 + "]" * 50_000, "malformed JSON: nested too deeply"),
        ('{"id": "a", "tokens": [1e999]}', "token 0 is inf"),
    ],
    ids=["5,000 digits", "deep nesting", "infinite number"],
)
def test_poison_lines_are_input_errors(tmp_path, line, needle):
    """A line any JSON parser rejects, for any reason (a number with too many digits, brackets nested
    too deep), is an InputError naming the file and line, never a ValueError or RecursionError."""
    path = write(tmp_path, ['{"id": "ok", "tokens": [1]}', line])
    with pytest.raises(InputError) as info:
        Workload.from_jsonl(path)
    assert info.value.line == 2 and needle in str(info.value)


def test_one_line_reader_drops_a_byte_order_mark_only_at_the_start(tmp_path):
    """The JSONL line reader plan and pack share drops a UTF-8 byte-order mark on line 1, skips blank
    lines, reports a line that is not UTF-8 and tracks the byte offset after each line."""
    path = tmp_path / "w.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"b": 2}\r\n\xff\n')
    with path.open("rb") as handle:
        lines = list(jsonl_lines(handle))
    assert [(e.line, e.text) for e in lines[:2]] == [(1, '{"a": 1}\n'), (3, '{"b": 2}\r\n')]
    assert lines[2].text is None and "not UTF-8" in lines[2].error
    assert [e.end for e in lines] == [12, 13 + 10, 13 + 10 + 2]
    with path.open("rb") as handle:
        resumed = list(jsonl_lines(handle, offset=lines[0].end, line=1))
    assert [e.line for e in resumed] == [3, 4]

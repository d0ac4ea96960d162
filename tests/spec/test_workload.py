"""Workload types and the JSONL reader."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cpplan import InputError, Workload
from cpplan.spec.workload import Request, parse_item_line


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
        ('{"id": "a", "requests": []}', "requests", "at least 1"),
        ('{"tokens": [1]}', "id", "missing"),
        ('{"id": 3, "tokens": [1]}', "id", "string"),
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

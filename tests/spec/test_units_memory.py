"""Sizes are read exactly and bounded; --memory has one meaning and refuses a missing unit."""

from __future__ import annotations

import pytest

from cpplan import InputError, Settings, load_model
from cpplan.spec.units import MAX_BYTES, memory_from_gpu, parse_bytes, parse_memory


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9223372036854775807", MAX_BYTES),
        ("0.1GB", 100_000_000),
        ("1.5e9", 1_500_000_000),
        ("80GiB", 80 * 2**30),
        ("2.5E3 KiB", 2_560_000),
        ("9.007199254740993e15", 9_007_199_254_740_993),
    ],
)
def test_sizes_are_read_exactly(text, value):
    """Sizes are whole bytes computed without float rounding (9,007,199,254,740,993 is not a float)."""
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["9223372036854775808", "10000000TB", "1e30"])
def test_sizes_above_2_63_are_refused(text):
    """A size above 2^63 - 1 bytes (the solver's integer range) is an InputError, not an overflow."""
    with pytest.raises(InputError, match="too large"):
        parse_bytes(text)


def test_settings_refuse_an_integer_budget_above_2_63():
    """memory_bytes=2**63 given as an integer is refused the same way."""
    with pytest.raises(InputError, match=r"2\^63 - 1"):
        Settings(model=load_model("qwen3-8b"), memory_bytes=2**63)


def test_plain_numbers_too_small_for_a_budget_get_a_hint():
    """`--memory 80` (80 bytes) is refused with the unit it probably meant; a large plain number is fine."""
    with pytest.raises(InputError, match=r"'80' has no unit, so it is 80 bytes: write 80GiB"):
        parse_memory("80")
    assert parse_memory(str(40 * 2**30)) == 40 * 2**30
    assert parse_memory("512KiB") == 512 * 1024


def test_gpu_memory_less_resident():
    """The budget of a GPU is its memory less what is resident before the wave, which must be less."""
    assert memory_from_gpu("141GB", "75GB") == 66 * 10**9
    with pytest.raises(InputError, match="field 'resident'"):
        memory_from_gpu("80GB", "80GB")

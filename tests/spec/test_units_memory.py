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
    with pytest.raises(
        InputError, match=r"'80' has no unit, so it is 80 bytes, less than 1 MiB: write 80GiB"
    ):
        parse_memory("80")
    assert parse_memory(str(40 * 2**30)) == 40 * 2**30
    assert parse_memory("512KiB") == 512 * 1024


def test_gpu_memory_less_resident():
    """The budget of a GPU is its memory less what is resident before the wave, which must be less."""
    assert memory_from_gpu("141GB", "75GB") == 66 * 10**9
    with pytest.raises(InputError, match="field 'resident'"):
        memory_from_gpu("80GB", "80GB")


def test_unit_letters_without_b_are_refused_with_both_spellings():
    """`8G`, `8Gi`, `512M`, `4k` are refused (8G is 8 GiB to some tools, 8 GB to others): the error names
    the binary and the decimal spelling and lists the accepted units; `8GiB`, `8GB` and `8 GB` are read."""
    from cpplan.spec.units import parse_bytes

    for text, binary, decimal in (("8G", "8GiB", "8GB"), ("8Gi", "8GiB", "8GB"), ("512M", "512MiB", "512MB")):
        with pytest.raises(InputError, match="has no B") as info:
            parse_bytes(text)
        assert f"write {binary} (binary" in str(info.value) and f"or {decimal} (decimal" in str(info.value)
        assert "GiB, GB, MiB, MB, KiB, KB" in str(info.value)
    for text in ("4k", "2T", "1Ti", "3 g"):
        with pytest.raises(InputError, match="has no B"):
            parse_bytes(text)
    assert parse_bytes("8GiB") == 8 * 2**30 and parse_bytes("8GB") == parse_bytes("8 gb") == 8 * 10**9
    assert parse_bytes("2TB") == 2 * 10**12 and parse_bytes("1TiB") == 2**40 and parse_bytes("4KB") == 4000


def test_a_negative_memory_says_it_must_be_positive():
    """`--memory -1` (and `-5GiB`, `0`) is refused as not positive, not as an unreadable size."""
    for text in ("-1", "-5GiB", " -0.5 GB", "0"):
        with pytest.raises(InputError, match=r"field 'memory': memory must be positive"):
            parse_memory(text)


def test_only_a_budget_no_gpu_holds_is_warned_about():
    """A --memory above what the largest GPU holds (288 GB) gets a warning; every budget one GPU can have
    free, the sizes of whole GPUs included (40GiB, 80GB, 141GB), gets none."""
    from cpplan.spec.units import memory_warning, parse_bytes

    for size in ("289GB", "500GB", "1TiB"):
        warning = memory_warning(parse_bytes(size))
        assert warning is not None and "more than any GPU holds" in warning, size
    for size in ("40GiB", "80GB", "80GiB", "141GB", "192GB", "288GB", "8GiB"):
        assert memory_warning(parse_bytes(size)) is None, size


def test_the_cli_warns_of_no_budget_the_project_uses(tmp_path, capsys):
    """`cpplan plan --memory 40GiB` and `80GB` (the budgets of the README's API example, the verl snippet
    and `cpplan bench`) plan without a warning; `--memory 500GB` plans and warns on standard error."""
    from pathlib import Path

    from cpplan.cli import main

    example = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
    args = ["plan", str(example), "--model", "qwen3.6-35b-a3b", "--topology", "cp=2", "--quiet"]
    for size in ("40GiB", "80GB"):
        assert main([*args, "--memory", size, "-o", str(tmp_path / "p.json")]) == 0
        assert "warning" not in capsys.readouterr().err, size
    assert main([*args, "--memory", "500GB", "-o", str(tmp_path / "q.json")]) == 0
    assert "warning: --memory 500,000,000,000 bytes" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "needle", "absent"),
    [
        ("0.5B", "'0.5B' is less than one byte", "must be positive"),
        ("8.5", "so it is 8.5 bytes", "it is 8 bytes"),
        ("1048575", "so it is 1,048,575 bytes, less than 1 MiB: give a unit", "1048575GiB"),
        ("80", "write 80GiB (or 80GB) if that is what you meant", "MiB (or"),
    ],
)
def test_memory_slips_are_said_as_they_are(text, needle, absent):
    """A size below one byte says so (not "must be positive"), a plain number says the bytes it is
    exactly (8.5, not 8), and a unit is suggested only where the number with it is a size a GPU can have
    free (80 -> 80GiB; 1048575 gets no 1048575GiB)."""
    with pytest.raises(InputError) as info:
        parse_memory(text)
    assert needle in str(info.value) and absent not in str(info.value)


def test_a_float_memory_budget_is_refused_as_not_whole():
    """`memory_bytes=8.5e9` (a float, even a whole one) is refused saying a whole number of bytes or a size
    string is wanted; an int and a numpy integer are taken."""
    import numpy as np

    import cpplan

    for value in (8.5e9, 8e9, np.float64(8e9)):
        with pytest.raises(InputError, match=r"field 'memory': must be a whole number of bytes \(an int\)"):
            cpplan.Planner(model="qwen3-8b", memory_bytes=value)
    assert (
        cpplan.Planner(model="qwen3-8b", memory_bytes=np.int64(8 * 10**9)).settings.memory_bytes == 8 * 10**9
    )

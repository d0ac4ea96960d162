"""Topology parsing, byte sizes and the card formula language."""

from __future__ import annotations

import pytest

from cpplan import InputError, Topology
from cpplan.spec.expr import FormulaError, evaluate
from cpplan.spec.units import parse_bytes


def test_topology_defaults_to_one():
    """Sizes left out default to 1: ``cp=4`` is tp=1, cp=4, ep=1, etp=1, pp=1, dp=1."""
    t = Topology.parse("cp=4")
    assert (t.tp, t.cp, t.ep, t.etp, t.pp, t.dp) == (1, 4, 1, 1, 1, 1)
    assert str(Topology.parse("tp=2,cp=2,ep=4,dp=1")) == "tp=2,cp=2,ep=4,etp=1,pp=1,dp=1"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("cp=0", "topology.cp"),
        ("cp=x", "topology.cp"),
        ("xp=2", "topology"),
        ("ep=3,cp=2", "topology"),
        ("cp=2,cp=4", "topology.cp"),
    ],
)
def test_bad_topology_names_field(text, field):
    """cp = 0, non-integers, unknown axes, an expert grid that does not divide and repeats are refused."""
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        Topology.parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GiB", 80 * 2**30),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5KiB", 1536),
        ("1000", 1000),
        ("2e9", 2 * 10**9),
    ],
)
def test_parse_bytes(text, expected):
    """Sizes accept GiB, GB, MiB, MB, KiB, KB and plain bytes."""
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80XB", "", "GiB", "-1GiB", "0"])
def test_parse_bytes_refuses(text):
    """Unknown units, missing numbers and non-positive sizes are refused naming the field."""
    with pytest.raises(InputError, match="memory"):
        parse_bytes(text)


def test_formulas():
    """Formulas evaluate arithmetic, comparisons, conditionals and min/max/ceil; nothing else."""
    env = {"a": 3, "b": 4}
    assert evaluate("a * b + 2 ** 3 - ceil(b / 3)", env) == 18
    assert evaluate("a if b > 3 else 0", env) == 3
    assert evaluate("a == 3 and not b == 3", env) == 1
    with pytest.raises(FormulaError, match="unknown name 'c'"):
        evaluate("c + 1", env)
    with pytest.raises(FormulaError, match="unsupported"):
        evaluate("__import__('os')", env)


def test_topology_sizes_are_integers_only():
    """One rule for every size: an int or a numpy integer is taken; a string, a float (even 2.0) or a
    boolean is refused naming the field and the type, pointing at Topology.parse for text."""
    import numpy as np

    assert Topology(cp=np.int64(2), dp=np.int32(2)).cp == 2
    assert type(Topology(cp=np.int64(2)).cp) is int
    for value, kind in (("2", "str"), (2.0, "float"), (True, "bool")):
        with pytest.raises(
            InputError, match=rf"field 'topology.cp': must be an integer \(an int, not a {kind}\)"
        ):
            Topology(cp=value)

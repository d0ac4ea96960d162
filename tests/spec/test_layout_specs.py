"""Layout specs: the names a solver profile may list."""

import pytest

from cpplan.spec.layout_specs import parse_layout


def test_layout_specs():
    """Unknown layout specs are refused."""
    assert parse_layout("min_span:64") == ("min_span", 64)
    with pytest.raises(ValueError, match="unknown layout"):
        parse_layout("half")

"""A hand-off price is priced when any of its parts costs time."""

from __future__ import annotations

import dataclasses

from cpplan.spec.card import HandoffSeconds


def test_every_part_of_the_handoff_price_makes_it_priced():
    """``priced`` is false for the zero price and true when any one field (each field of the class, so
    a field added later is checked too) is positive alone."""
    assert not HandoffSeconds().priced
    for field in dataclasses.fields(HandoffSeconds):
        assert HandoffSeconds(**{field.name: 1e-6}).priced, field.name

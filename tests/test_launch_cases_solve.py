"""Every pinned launch case of the real-library tier has a plan, checked here without the libraries.

tests_real/cases.py pins offers, card counts and engines; a catalog change (an offer sold as whole instances, a GPU
renamed, a risk default that moves a plan past the card) would otherwise surface only when that tier collects its
cases, after its environments are installed. Solving each variant here keeps the README tier the first to fail.
"""

from __future__ import annotations

import pytest

from tests_real.cases import VARIANTS, solved


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_launch_variant_solves_with_its_pins(name: str):
    case = solved(name)
    pins = VARIANTS[name]["plan"]
    for key in ("gpu", "offer", "cards", "zero_stage", "offload", "tp", "pp", "nodes"):
        if key in pins:  # the pinned knob is what the plan launches
            got = getattr(case.plan, key)
            assert (got.value if hasattr(got, "value") else got) == pins[key], (name, key)
    assert case.settings, f"{name}: no launch settings written"

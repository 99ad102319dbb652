"""The terminal report says what it means: headers name what their column shows, each verdict names what fails,
money and memory are written as everywhere else (thousands separators, currency), and a bound never reads above
the plan it bounds (QA review of the report text)."""

from __future__ import annotations

import re

from tests.conftest import REPO

SEVENTY_B = REPO / "scenarios" / "70b.yaml"
RTX_3060_MB8 = ("--gpu", "RTX-3060", "--cards", "1", "--micro-batch", "8")


def _text(result) -> str:
    return " ".join(result.stdout.split())  # rich wraps long lines


def test_the_memory_table_header_names_the_unit_it_shows(run_cli):
    out = run_cli("estimate", REPO / "scenarios" / "7b-lora.yaml", *RTX_3060_MB8).stdout
    header = next(line for line in out.splitlines() if line.lstrip().startswith("component"))
    assert "bytes" not in header and "per GPU" in header
    assert re.search(r"total\s+│\s+[\d,.]+ GiB", out)

"""docs/scenario-reference.md is generated from the schema and checked in current; every field is on it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from optimizer.inputs.schema import Method
from optimizer.report import reference as report_reference
from optimizer.report.reference import BLOCKS, PAGE, render, type_text
from tests.conftest import REPO


def test_checked_in_page_matches_the_schema():
    assert PAGE.read_text(encoding="utf-8") == render(), "run: python -m optimizer.report.reference"
    assert report_reference.main(["--check"]) == 0


def test_every_field_of_every_block_is_listed_with_a_meaning():
    text = render()
    for _, model, prefix in BLOCKS:
        for name, info in model.model_fields.items():
            assert f"| `{prefix}{name}` |" in text
            if model.__name__ != "ModelArch":  # the catalog's own architecture fields (notes, source) are free text
                assert info.description, f"{model.__name__}.{name} has no description"


def test_defaults_a_user_relies_on_are_stated():
    text = render()
    assert "| `lora.rank` | integer | 16 |" in text
    assert "| `training.attention` | one of: flash, sdpa, eager | flash |" in text
    assert "| `data.packing` | true/false | true |" in text
    assert type_text(Method) == "one of: full, lora, qlora"


def test_help_prints_the_usage_and_writes_nothing(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("stale\n", encoding="utf-8")
    before = PAGE.stat().st_mtime_ns
    done = subprocess.run([sys.executable, "-m", "optimizer.report.reference", "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert done.returncode == 0
    assert "--check" in done.stdout and "--output" in done.stdout
    assert PAGE.stat().st_mtime_ns == before


def test_check_and_write_on_a_page_elsewhere(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("stale\n", encoding="utf-8")
    assert report_reference.main(["--check", "--output", str(page)]) == 1
    assert page.read_text(encoding="utf-8") == "stale\n"  # --check writes nothing
    assert report_reference.main(["--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
    assert report_reference.main(["--check", "--output", str(page)]) == 0


def test_an_unknown_option_is_a_usage_error():
    with pytest.raises(SystemExit) as exit_:
        report_reference.main(["--chek"])
    assert exit_.value.code == 2

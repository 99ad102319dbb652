"""Figures README.md and docs/trade-offs.md quote from benchmarks (bench/readme_figures.py).

The benchmarks run in CI's figures tier (.ci/figures-check: ``--check``); here: the rule-of-thumb saving figures are
computed as the docs describe them, the two documents quote the same ones, every quoting sentence is still found, and
a stale figure is named and rewritten.
"""

from __future__ import annotations

import importlib
import re
import shutil

import pytest

from bench import expert_review as review
from bench import readme_figures
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_saving_figures_median_zeroes_and_others() -> None:
    # five scenarios: two save nothing at one decimal (0.0004 rounds to 0.0%), the others 10%, 40%, 50%
    figs = review.saving_figures([0.0, 0.0004, 0.1, 0.4, 0.5])
    assert figs == {"n": "5", "median": "10.0", "zero": "2", "others": "40.0"}


def test_readme_quotes_the_table_of_trade_offs() -> None:
    quoted = review.quoted_figures()
    assert set(quoted) == {"charitable", "as_written"}
    assert review.sync_figures(quoted, write=False) == []


def test_stale_figures_are_named_and_rewritten(tmp_path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copy(REPO / "docs" / "trade-offs.md", tmp_path / "docs" / "trade-offs.md")
    quoted = review.quoted_figures(tmp_path)
    measured = {k: dict(v) for k, v in quoted.items()}
    measured["charitable"]["median"] = "31.4"
    measured["as_written"]["zero"] = "3"
    stale = review.sync_figures(measured, write=True, root=tmp_path)
    assert len(stale) == 3  # the two table rows and the README's median; the README quotes no as-written zero count
    assert any(line.startswith("README.md median: quotes") for line in stale)
    assert review.quoted_figures(tmp_path) == measured
    assert review.sync_figures(measured, write=False, root=tmp_path) == []
    assert "the median saving is 31.4% (" in (tmp_path / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("bench", ["expert_review", "plans_as_sold", "calibrate_holdout"])
def test_every_benchmark_finds_its_sentence_in_the_readme(bench) -> None:
    found = importlib.import_module(f"bench.{bench}").README_SENTENCE.search(README)
    assert found is not None
    assert all(found.group(g) for g in found.re.groupindex)


def test_sync_rewrites_only_the_figures_and_keeps_the_wrapping(tmp_path) -> None:
    path = tmp_path / "README.md"
    path.write_text("A run of 12 cases\n  scored 3.5% today; 12 again.\n", encoding="utf-8")
    pattern = re.compile(r"run of (?P<n>\d+) cases\s+scored (?P<err>[\d.]+)%")
    assert readme_figures.sync(path, pattern, {"n": "12", "err": "3.5"}, write=True) == []
    stale = readme_figures.sync(path, pattern, {"n": "140", "err": "3.5"}, write=True)
    assert stale == ["README.md n: quotes 12, measured 140"]
    assert path.read_text(encoding="utf-8") == "A run of 140 cases\n  scored 3.5% today; 12 again.\n"
    assert readme_figures.sync(path, re.compile(r"(?P<x>nowhere)"), {"x": "1"}, write=False)[0].startswith(
        "README.md: no sentence matches")

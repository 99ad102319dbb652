"""The rule-of-thumb saving figures quoted in README.md and docs/trade-offs.md (bench/expert_review.py).

The review itself runs in CI's figures tier (``python bench/expert_review.py --check``); here: the figures are
computed as the docs describe them, the two documents quote the same ones, and a stale figure is found and rewritten.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("expert_review", REPO / "bench" / "expert_review.py")
review = sys.modules.setdefault("expert_review", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(review)


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

"""Exit status: 0 answered with a plan, 1 answered without one, 2 bad input (cli.EXIT_CODES)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from optimizer.inputs.errors import EXIT_BAD_INPUT, EXIT_NO_PLAN

from .conftest import REPO


def test_estimate_that_does_not_fit_exits_1(run_cli):
    result = run_cli("estimate", REPO / "scenarios/7b-lora.yaml", "--gpu", "RTX-4090", "--cards", "1",
                     "--micro-batch", "2", "--checkpointing", "full")  # fmt: skip
    assert "DOES NOT FIT" in result.stdout
    assert result.exit_code == EXIT_NO_PLAN == 1


def test_estimate_that_fits_exits_0(run_cli):
    result = run_cli("estimate", REPO / "scenarios/7b-qlora.yaml", "--gpu", "RTX-4090", "--cards", "1",
                     "--micro-batch", "1", "--checkpointing", "full", "--json")  # fmt: skip
    assert json.loads(result.stdout)["memory"]["fits"] is True
    assert result.exit_code == 0


def test_infeasible_solve_exits_1_in_text_and_json(run_cli, write_scenario):
    path = write_scenario(budget={"amount": 0.01, "currency": "USD"})
    assert run_cli("solve", path).exit_code == EXIT_NO_PLAN
    assert run_cli("solve", path, "--json").exit_code == EXIT_NO_PLAN


def test_bad_input_stays_exit_2(run_cli, write_scenario):
    result = run_cli("solve", write_scenario(seq_len=-1))
    assert result.exit_code == EXIT_BAD_INPUT == 2


def test_batch_strict_exits_1_when_a_row_is_infeasible_or_an_error(run_cli, tmp_path: Path, write_scenario):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(REPO / "scenarios/7b-qlora.yaml", folder / "a.yaml")
    good = run_cli("batch", folder, "--strict", "--workers", "1")
    assert good.exit_code == 0
    write_scenario("in/b.yaml", budget={"amount": 0.01, "currency": "USD"})
    assert run_cli("batch", folder, "--workers", "1").exit_code == 0  # without --strict: rows are the answer
    assert run_cli("batch", folder, "--strict", "--workers", "1").exit_code == EXIT_NO_PLAN


def test_help_documents_the_exit_codes(run_cli):
    text = " ".join(run_cli("--help").stdout.split())
    assert "Exit status:" in text and "1 answered without a plan" in text and "130 interrupted" in text

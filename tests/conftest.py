"""Shared builders: scenario documents, scenario files, the built-in catalog, a CLI runner."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from optimizer.catalog import load_catalog
from optimizer.cli import main

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "reference"

BASE_SCENARIO: dict[str, Any] = {
    "name": "test-7b-lora",
    "model": "Llama-3.1-8B",
    "method": "lora",
    "lora": {"rank": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    "data": {"tokens": 2.0e7, "epochs": 1},
    "seq_len": 2048,
    "global_batch": 32,
    "training": {"framework": "hf", "optimizer": "adamw", "attention": "flash"},
}


def scenario_doc(**changes: Any) -> dict[str, Any]:
    """BASE_SCENARIO with top-level keys replaced (a value of None deletes the key)."""
    doc = copy.deepcopy(BASE_SCENARIO)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[..., Path]:
    """Write a scenario document (BASE_SCENARIO with changes) to a YAML file and return its path."""

    def _write(name: str = "scenario.yaml", doc: dict[str, Any] | None = None, **changes: Any) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc if doc is not None else scenario_doc(**changes), sort_keys=False))
        return path

    return _write


@pytest.fixture(scope="session")
def catalog():
    """The built-in catalog with every offer file."""
    return load_catalog()


@pytest.fixture
def run_cli() -> Callable[..., Any]:
    """Invoke the console entry point in-process; returns click's Result (exit_code, stdout, stderr).

    Goes through ``optimizer.cli.main`` so usage errors get the same one-line treatment as in a shell.
    """
    runner = CliRunner()

    def _run(*args: str) -> Any:
        return runner.invoke(_entry, [str(a) for a in args], catch_exceptions=False)

    return _run


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.pass_context
def _entry(ctx: click.Context) -> None:
    main(list(ctx.args))

"""The exporter registry (optimizer/launch/exporters.py) is the one list: files, package, README and CLI follow it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import optimizer.launch
from optimizer.launch import exporters
from optimizer.launch.exporters import EXPORTERS
from optimizer.report.plan import launch_files

from .conftest import REPO

LAUNCH = Path(optimizer.launch.__file__).parent
PLUMBING = {"__init__", "launch_common", "lora_names", "by_engine", "exporters"}  # shared pieces, not exporters
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_every_engine_module_is_registered_and_every_entry_has_its_module():
    modules = {p.stem for p in LAUNCH.glob("*.py")} - PLUMBING
    assert modules == {e.module for e in EXPORTERS}


def test_the_package_docstring_names_every_registered_module():
    doc = optimizer.launch.__doc__ or ""
    missing = [e.module for e in EXPORTERS if not re.search(rf"\b{e.module}\b", doc)]
    assert missing == []


def test_the_readme_engine_table_is_the_registry():
    assert exporters.readme_table() in README
    section = README.split("## Launch settings", 1)[1].split("\n## ", 1)[0]
    for name in exporters.file_names():
        assert f"`{name}`" in section, name


def test_the_launch_dir_help_lists_every_file(run_cli):
    help_text = " ".join(run_cli("solve", "--help").stdout.split())
    for name in exporters.file_names():
        assert name in help_text, name
    assert "llamafactory.yaml (hf plans)" in help_text and "ds_config.json (hf plans under DeepSpeed)" in help_text


def test_only_registered_names_become_files():
    """A settings key that merely ends in .yaml is shown in launch.yaml but not written as a file of its own."""
    settings = {"command": "x", "ds_config.json": {"a": 1}, "stray.yaml": {"b": 2}, "llamafactory.yaml": {"c": 3}}
    files = launch_files(settings)
    assert sorted(files) == ["ds_config.json", "launch.yaml", "llamafactory.yaml"]
    assert files["ds_config.json"] == '{\n  "a": 1\n}\n' and yaml.safe_load(files["llamafactory.yaml"]) == {"c": 3}
    assert yaml.safe_load(files["launch.yaml"])["stray.yaml"] == {"b": 2}


def test_solve_writes_the_files_the_registry_says_apply(run_cli, tmp_path):
    """7b-full runs under DeepSpeed (ds_config.json); every hf plan gets the LLaMA-Factory file."""
    out = tmp_path / "launch"
    done = run_cli("solve", REPO / "scenarios" / "7b-full.yaml", "--launch-dir", out)
    assert done.exit_code == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    launch = yaml.safe_load((out / "launch.yaml").read_text())
    expected = ["launch.yaml"] + [e.file for e in EXPORTERS if e.file and e.file in launch]
    assert written == sorted(expected) and "llamafactory.yaml" in written
    assert ("ds_config.json" in written) == ("deepspeed" in launch["training_arguments"])

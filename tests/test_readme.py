"""Every ``ftopt ...`` command in README.md's code blocks runs as written and exits as the README says.

The commands run in a scratch folder holding a copy of scenarios/ and the files the README shows as YAML blocks
whose first line is ``# file: NAME``. A command whose comment says ``exits 1`` must exit 1; every other must
exit 0. Each runs in-process through the console entry point (optimizer.cli.commands.main), so the whole README takes a
few seconds.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from bench import loso
from optimizer.inputs.catalog import load_catalog

from .conftest import REPO
from .memory_reference_cases import load_all_cases as memory_cases
from .memory_reference_cases import source_of as memory_source

README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)


def _commands() -> list[tuple[str, int]]:
    """(command, expected exit status) for every line of a bash block that starts with ``ftopt``."""
    out = []
    for lang, body in BLOCKS:
        if lang != "bash":
            continue
        for line in body.splitlines():
            command, _, comment = line.partition("  #")
            if command.strip().startswith("ftopt "):
                out.append((command.strip(), 1 if "exits 1" in comment else 0))
    return out


def _files() -> dict[str, str]:
    """File name -> text of every YAML block that starts with ``# file: NAME``."""
    out = {}
    for lang, body in BLOCKS:
        first, _, rest = body.partition("\n")
        match = re.fullmatch(r"# file: (\S+)", first.strip())
        if lang == "yaml" and match:
            out[match.group(1)] = rest
    return out


COMMANDS = _commands()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "scenarios", folder / "scenarios")
    for name, text in _files().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_the_readme_has_commands_and_files_to_run():
    assert len(COMMANDS) >= 15
    assert {"my-lora.yaml", "my-offers.yaml"} <= set(_files())
    assert any(code == 1 for _, code in COMMANDS)  # the impossible job is shown too


@pytest.mark.parametrize("command,expected", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_readme_command_runs_as_written(run_cli, scratch: Path, monkeypatch, command: str, expected: int):
    if "--plot" in command:
        pytest.importorskip("matplotlib")
    monkeypatch.chdir(scratch)
    result = run_cli(*shlex.split(command)[1:])
    assert result.exit_code == expected, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr


def test_the_uncertainty_figures_are_todays(run_cli, monkeypatch):
    """README's "What the output means" quotes the held-out cases and bands of calibration.yaml ``accuracy`` (written
    by ``python bench/loso.py --write``) and what ``ftopt solve scenarios/70b.yaml`` prints: a refit that changes
    them fails here until the README says the new figures."""
    acc = load_catalog().calibration["accuracy"]
    mem, time, wide = acc["memory"], acc["time"], acc["memory_coverage"]["uncovered"]["ratio_p90"]
    measured = [c for c in memory_cases() if c["measured"].get("bound") is None]  # bench/loso.py's memory cases
    runs = [c for f in loso.CASE_FILES for c in yaml.safe_load(f.read_text())["cases"] if "excluded" not in c]
    assert (len(measured), len(runs)) == (mem["cases"], time["cases"])
    text = " ".join(README.split())
    assert (f"memory: {mem['cases']} measured runs from {len({memory_source(c) for c in measured})} sources, band "
            f"{mem['ratio_p10']:.3f}-{mem['ratio_p90']:.3f}x today, its high end widened to {wide:.3f}x") in text
    assert (f"time: {time['cases']} runs from {len({loso.source_of(c) for c in runs})} sources, band "
            f"{time['ratio_p10']:.3f}-{time['ratio_p90']:.3f}x") in text
    monkeypatch.chdir(REPO)
    printed = " ".join(run_cli("solve", "scenarios/70b.yaml").stdout.split())
    for quoted in re.findall(r'"(on \d+ \+ \d+ held-out cases|peak x [\d.]+)"', text):
        assert quoted in printed, quoted
    assert f"on {mem['cases']} + {time['cases']} held-out cases" in text and f"peak x {wide:.3f}" in text

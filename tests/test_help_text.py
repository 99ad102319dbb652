"""Every option of every command says what it does, and no help cites a file the repository does not hold."""

from __future__ import annotations

import re

import click

from optimizer.cli.commands import cli

from .conftest import REPO


def _commands(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")


def test_every_option_has_help_text():
    missing = [f"{name} {p.opts[0]}" for name, cmd in _commands(cli) for p in cmd.params
               if isinstance(p, click.Option) and not p.help]  # fmt: skip
    assert missing == []


def test_files_cited_in_help_exist_in_the_repository(run_cli):
    texts = [run_cli(*name.split(), "--help").stdout for name, _ in _commands(cli)] + [run_cli("--help").stdout]
    cited = {m for t in texts for m in re.findall(r"[\w./-]+\.(?:md|yaml)\b", t) if "/" in m}
    assert cited, "expected help to cite docs"
    assert [c for c in cited if not (REPO / c).exists() and not c.startswith(("scenarios/", "my-"))] == []

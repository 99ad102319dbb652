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


def _builtin_catalogs() -> list[str]:
    return sorted(p.stem for p in (REPO / "catalogs" / "offers").glob("*.yaml"))


def test_help_that_lists_the_built_in_catalogs_lists_every_one(run_cli):
    # --catalog once said "(cn, us)" when catalogs/offers/ held seven files; the list is now built from the files
    names = _builtin_catalogs()
    assert len(names) >= 7
    seen = 0
    for name, cmd in _commands(cli):
        for p in cmd.params:
            if isinstance(p, click.Option) and "built-in" in (p.help or ""):
                listed = re.search(r"built-in name \(([^)]*)\)", p.help or "")
                assert listed, f"{name} {p.opts[0]}: {p.help}"
                assert listed.group(1).split(", ") == names, f"{name} {p.opts[0]}"
                seen += 1
    assert seen >= 8  # --catalog and --add-catalog of solve, pareto, estimate, ...
    text = " ".join(run_cli("estimate", "--help").stdout.split())
    assert f"built-in name ({', '.join(names)})" in text


def test_docs_that_list_the_built_in_catalogs_list_every_one():
    names = set(_builtin_catalogs())
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    lists = [(page.name, line) for page in pages for line in page.read_text(encoding="utf-8").splitlines()
             if re.search(r"built-in(?: name)?[:( ]+cn\b|built-in(?: name)? \(", line)]  # fmt: skip
    assert len(lists) >= 2
    for page, line in lists:
        assert {n for n in names if re.search(rf"\b{n}\b", line)} == names, f"{page}: {line}"


def test_only_commands_with_a_scenario_say_their_catalog_replaces_the_scenarios(run_cli):
    # catalog list and show said --catalog "REPLACES the scenario's catalog", though they read no scenario
    for name, cmd in _commands(cli):
        takes = any(isinstance(p, click.Argument) and p.name == "scenario" for p in cmd.params)
        for p in cmd.params:
            if isinstance(p, click.Option) and "the scenario's" in (p.help or ""):
                assert takes, f"{name} {p.opts[0]}: {p.help}"
    for command in (["catalog", "list"], ["catalog", "show"]):
        text = " ".join(run_cli(*command, "--help").stdout.split())
        assert "to read INSTEAD of every built-in catalog (repeatable)" in text

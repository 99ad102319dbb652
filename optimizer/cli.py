"""The ``ftopt`` command line: parse, call one library function, hand the result to report.py.

Every FtoptError becomes one line on stderr and exit status 2; nothing is written when a command fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from optimizer import report, report_batch, report_catalog, report_front
from optimizer.catalog import load_catalog
from optimizer.cli_import import import_group
from optimizer.errors import FtoptError
from optimizer.planner import Overrides, estimate_scenario, solve_scenario
from optimizer.schema import Checkpointing, Objective, Offload, Precision
from optimizer.solver import SolverSettings
from optimizer.validator import validate_catalog_files

SOLVE_EXAMPLES = """\b
Examples:
  ftopt solve scenarios/70b.yaml
  ftopt solve scenarios/7b-qlora.yaml --objective time --json
  ftopt solve scenarios/70b.yaml --budget 20000 --deadline-hours 72 --top 3
  ftopt solve scenarios/7b-full.yaml --launch-dir launch/
"""
ESTIMATE_EXAMPLES = """\b
Examples:
  ftopt estimate scenarios/7b-lora.yaml --gpu RTX-4090 --cards 1 --micro-batch 2 --checkpointing full
  ftopt estimate scenarios/70b.yaml --gpu A100-80G --cards 8 --zero 3 --offload optimizer --micro-batch 1 --json
"""


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print the DESIGN.md section 6 document instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (DESIGN.md section 6).")(f)


def catalog_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--catalog``: offer files replacing the scenario's."""
    return click.option("--catalog", "catalogs", multiple=True, type=click.Path(), help="Offers file (repeatable).")(f)


class FtoptGroup(click.Group):
    """Click group that turns library errors into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; an FtoptError prints ``ftopt: error: <message>`` and exits 2."""
        try:
            return super().invoke(ctx)
        except FtoptError as exc:
            click.echo(f"ftopt: error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=FtoptGroup)
@click.version_option(package_name="ftopt")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how many, how long, configured how."""


@cli.command(epilog=SOLVE_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--objective", type=click.Choice([o.value for o in Objective]), help="Minimise cost or time first.")
@click.option("--budget", type=float, help="Budget amount in the scenario's budget currency.")
@click.option("--deadline-hours", type=float, help="Wall-clock limit in hours.")
@click.option("--top", "top_k", type=click.IntRange(1, 100), default=1, help="Also list the next best plans.")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0, help="CP-SAT time limit (s).")
@click.option("--launch-dir", type=click.Path(file_okay=False), help="Write launch.yaml (and ds_config.json) here.")
@catalog_option
@json_option
def solve(scenario: str, objective: str | None, budget: float | None, deadline_hours: float | None, top_k: int,
          time_limit: float, launch_dir: str | None, catalogs: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Find the optimal plan for SCENARIO (proven by CP-SAT)."""
    ov = Overrides(Objective(objective) if objective else None, budget, deadline_hours, list(catalogs) or None)
    result = solve_scenario(scenario, ov, SolverSettings(time_limit_s=time_limit), top_k=top_k)
    for name, text in report.launch_files(result.launch or {}).items() if launch_dir and result.launch else ():
        report.write_atomic(f"{launch_dir}/{name}", text)
    if as_json:
        click.echo(report.dumps(report.solve_json(result)), nl=False)
    else:
        report.print_solve(result, report.console())


@cli.command(epilog=ESTIMATE_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--gpu")
@click.option("--offer", help="Offer id (default: the cheapest offer for the GPU).")
@click.option("--cards", type=int)
@click.option("--tp", type=int)
@click.option("--pp", type=int)
@click.option("--zero", "zero_stage", type=click.IntRange(0, 3))
@click.option("--micro-batch", type=int)
@click.option("--offload", type=click.Choice([o.value for o in Offload]))
@click.option("--checkpointing", type=click.Choice([c.value for c in Checkpointing]))
@click.option("--precision", type=click.Choice([p.value for p in Precision]))
@catalog_option
@json_option
def estimate(scenario: str, catalogs: tuple[str, ...], as_json: bool, **pins: Any) -> None:
    """Evaluate one configuration of SCENARIO: memory breakdown, fit, time and cost."""
    est = estimate_scenario(scenario, pins, Overrides(catalog=list(catalogs) or None))
    if as_json:
        click.echo(report.dumps(report.estimate_json(est)), nl=False)
    else:
        report.print_estimate(est, report.console())


PARETO_EXAMPLES = """\b
Examples:
  ftopt pareto scenarios/70b.yaml
  ftopt pareto scenarios/7b-lora.yaml --plot front.png --csv front.csv
  ftopt pareto scenarios/14b-lora.yaml --deadline-hours 24 --json
"""
BATCH_EXAMPLES = """\b
Examples:
  ftopt batch scenarios/ -o results.jsonl
  ftopt batch 'projects/**/*.yaml' -o results.csv --workers 8
  ftopt batch scenarios/ -o results.jsonl --backend ray --address auto
"""


@cli.command(epilog=PARETO_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--budget", type=float, help="Budget amount in the scenario's budget currency.")
@click.option("--deadline-hours", type=float, help="Wall-clock limit in hours.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Draw the front to a .png or .svg file.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the front as CSV to this file.")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0, help="CP-SAT limit per stage (s).")
@catalog_option
@json_option
def pareto(scenario: str, budget: float | None, deadline_hours: float | None, plot_path: str | None,
           csv_path: str | None, time_limit: float, catalogs: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Every non-dominated plan of SCENARIO, total cost versus wall-clock hours (each proven by CP-SAT)."""
    from optimizer.pareto import pareto_scenario

    ov = Overrides(None, budget, deadline_hours, list(catalogs) or None)
    result = pareto_scenario(scenario, ov, SolverSettings(time_limit_s=time_limit))
    if plot_path:
        report_front.plot_front(result, plot_path)
    if csv_path:
        report.write_atomic(csv_path, report_front.pareto_csv(result))
    if as_json:
        click.echo(report.dumps(report_front.pareto_json(result)), nl=False)
    else:
        report_front.print_pareto(result, report.console())


@cli.command(epilog=BATCH_EXAMPLES)
@click.argument("scenarios", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results .jsonl or .csv (resumes if present).")
@click.option("--workers", type=click.IntRange(1, 4096), help="Processes (default: the cores available).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", help="Process pool or Ray.")
@click.option("--address", help="Ray cluster address (default: start a local Ray).")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0, help="CP-SAT limit per solve (s).")
def batch(scenarios: tuple[str, ...], output: str | None, workers: int | None, backend: str, address: str | None,
          time_limit: float) -> None:  # fmt: skip
    """Solve every scenario in SCENARIOS (files, folders, globs); one result row per scenario."""
    from optimizer.batch import Backend, expand, output_format, run_batch

    paths = expand(scenarios)
    if output:
        output_format(output)
    err = Console(stderr=True)
    with report_batch.batch_progress(err) as (on_start, on_row):
        summary = run_batch(paths, output, workers, Backend(backend), address, SolverSettings(time_limit_s=time_limit),
                            on_start, on_row)  # fmt: skip
    report_batch.print_batch_summary(summary, output, report.console() if output is None else err)
    if summary.interrupted:
        sys.exit(130)


CATALOG_EXAMPLES = """\b
Examples:
  ftopt catalog list
  ftopt catalog show H100-SXM
  ftopt catalog show aws-p5-h100 --json
  ftopt catalog validate
  ftopt catalog validate catalogs/offers/cn.yaml my-offers.yaml
"""
MODELS_EXAMPLES = """\b
Examples:
  ftopt models list
  ftopt models list --json
"""


@cli.group("catalog", epilog=CATALOG_EXAMPLES)
def catalog_group() -> None:
    """What can be rented: GPU types and offers, with their sources."""


@catalog_group.command("list", epilog=CATALOG_EXAMPLES)
@catalog_option
@json_option
def catalog_list(catalogs: tuple[str, ...], as_json: bool) -> None:
    """Every GPU type: memory, dense bf16 TFLOPS, offers, cheapest price per card-hour."""
    rows = report_catalog.gpu_rows(load_catalog(list(catalogs) or None))
    if as_json:
        click.echo(report.dumps(rows), nl=False)
    else:
        report.console().print(report_catalog.gpu_table(rows))


@catalog_group.command("show", epilog=CATALOG_EXAMPLES)
@click.argument("ident", metavar="ID")
@catalog_option
@json_option
def catalog_show(ident: str, catalogs: tuple[str, ...], as_json: bool) -> None:
    """Every field of the GPU (id or alias) or offer ID, with sources and dates."""
    entry = report_catalog.catalog_entry(load_catalog(list(catalogs) or None), ident)
    if as_json:
        click.echo(report.dumps(report_catalog.entry_json(entry)), nl=False)
    else:
        report_catalog.print_entry(entry, report.console())


@catalog_group.command("validate", epilog=CATALOG_EXAMPLES)
@click.argument("files", nargs=-1, type=click.Path())
def catalog_validate(files: tuple[str, ...]) -> None:
    """Check catalog FILES (default: the built-in catalog) against the schema; exit 2 at the first problem."""
    click.echo(report_catalog.validate_line(validate_catalog_files(list(files))))


catalog_group.add_command(import_group)


@cli.group("models", epilog=MODELS_EXAMPLES)
def models_group() -> None:
    """Model architectures known by name (catalogs/models.yaml)."""


@models_group.command("list", epilog=MODELS_EXAMPLES)
@json_option
def models_list(as_json: bool) -> None:
    """Every catalog architecture: parameters, layers, widths, heads, vocabulary."""
    rows = report_catalog.model_rows(load_catalog())
    if as_json:
        click.echo(report.dumps(rows), nl=False)
    else:
        report.console().print(report_catalog.model_table(rows))


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors (ours and click's usage errors) print one line and exit 2."""
    try:
        code = cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("ftopt: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"ftopt: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

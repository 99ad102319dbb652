"""The ``ftopt`` command line: parse, call one library function, hand the result to report.py.

Exit status (EXIT_CODES, also in ``ftopt --help`` and README.md): 0 an answer with a plan; 1 an answer without
one (infeasible scenario, an estimate that does not fit, a portfolio with a job without a plan, ``batch
--strict`` with an error or infeasible row);
2 bad input (every FtoptError: one line on stderr, nothing written); 3 an output file could not be written
(OutputError); 130 interrupted (Ctrl-C); 143 batch ended by SIGTERM.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from optimizer.cli.catalog_import import import_group
from optimizer.cli.measure import calibrate_command, probe_command
from optimizer.cli.portfolio import portfolio as portfolio_command
from optimizer.inputs.atomic import Output, check_writable, write_outputs_atomic
from optimizer.inputs.catalog import builtin_offer_names, load_catalog
from optimizer.inputs.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NO_PLAN,
    EXIT_OUTPUT,
    EXIT_TERMINATED,
    FtoptError,
)
from optimizer.inputs.schema import Checkpointing, Objective, Offload, Precision
from optimizer.launch import exporters
from optimizer.report import batch as report_batch
from optimizer.report import catalog as report_catalog
from optimizer.report import front as report_front
from optimizer.report import html as report_html
from optimizer.report import plan as report
from optimizer.solve.planner import Overrides, estimate_scenario, solve_scenario
from optimizer.solve.solver import SolverSettings
from optimizer.solve.validator import validate_catalog_files

EXIT_CODES = f"""\b
Exit status:
  0    answered with a plan (solve, pareto, every portfolio job), the configuration fits (estimate), every
       batch row solved
  {EXIT_NO_PLAN}    answered without a plan: infeasible scenario, estimate DOES NOT FIT, a portfolio job without a
       plan, batch --strict with an error or infeasible row, calibrate with no usable measurement
  {EXIT_BAD_INPUT}    bad input: the one-line error names the file, the field and what is allowed; a command
       group run without its subcommand prints its help (on stderr)
  {EXIT_OUTPUT}    an output file could not be written (not a regular file, a directory, read-only folder, full
       disk, size limit, another batch writing it): one line; the previous file is kept, and a command
       with several outputs writes none of them
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); batch keeps every finished row
  {EXIT_TERMINATED}  batch ended by SIGTERM: every finished row kept and the summary printed, as for Ctrl-C
"""


def _no_plan_unless(answered: bool) -> None:
    """End the command with EXIT_NO_PLAN when the answer it printed has no plan."""
    if not answered:
        click.get_current_context().exit(EXIT_NO_PLAN)


SOLVE_EXAMPLES = """\b
Examples:
  ftopt solve scenarios/70b.yaml
  ftopt solve scenarios/7b-qlora.yaml --objective time --json
  ftopt solve scenarios/70b.yaml --budget 20000 --deadline-hours 72 --top 3
  ftopt solve scenarios/7b-full.yaml --launch-dir launch/
  ftopt solve my-job.yaml --add-catalog my-offers.yaml
"""
ESTIMATE_EXAMPLES = """\b
Examples:
  ftopt estimate scenarios/7b-qlora.yaml --gpu RTX-4090 --cards 1 --micro-batch 1 --checkpointing full
  ftopt estimate scenarios/70b.yaml --gpu H100-SXM --offer lambda-gpu_8x_h100_sxm5-us-east-1 --cards 8 \
    --zero 3 --offload optimizer --micro-batch 1 --checkpointing full --json
"""


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print the docs/json-contract.md document instead of tables."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of tables (keys: docs/json-contract.md).")(f)  # fmt: skip


def html_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--html``: also write one self-contained page (optimizer/report/html) to FILE."""
    return click.option("--html", "html_path", type=click.Path(),
                        help="Also write a self-contained HTML report to this file.")(f)  # fmt: skip


def calibration_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--calibration``: a calibration overlay (``ftopt calibrate -o FILE``) replacing the scenario's."""
    return click.option("--calibration", type=click.Path(), help="Calibration overlay (ftopt calibrate).")(f)


def builtin_catalogs() -> str:
    """The built-in catalog names for help texts, from the files in catalogs/offers/ (so the list cannot go stale)."""
    return ", ".join(builtin_offer_names())


def catalog_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--catalog``: offer files replacing the scenario's."""
    return click.option("--catalog", "catalogs", multiple=True, type=click.Path(),
                        help=f"Offers file or built-in name ({builtin_catalogs()}); REPLACES the scenario's catalog "
                        "(repeatable).")(f)  # fmt: skip


def catalog_read_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--catalog`` of catalog list/show, which have no scenario: offer files read instead of every built-in one."""
    return click.option("--catalog", "catalogs", multiple=True, type=click.Path(),
                        help=f"Offers file or built-in name ({builtin_catalogs()}) to read INSTEAD of every built-in "
                        "catalog (repeatable).")(f)  # fmt: skip


def add_catalog_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--add-catalog``: offer files added to the scenario's."""
    return click.option("--add-catalog", "added", multiple=True, type=click.Path(),
                        help=f"Offers file or built-in name ({builtin_catalogs()}) offered BESIDE the scenario's "
                        "catalog (repeatable).")(f)  # fmt: skip


def overrides(objective: str | None = None, budget: float | None = None, deadline_hours: float | None = None,
              catalogs: tuple[str, ...] = (), added: tuple[str, ...] = (),
              calibration: str | None = None) -> Overrides:  # fmt: skip
    """The command line's replacements for scenario values."""
    return Overrides(objective=Objective(objective) if objective else None, budget=budget,
                     deadline_hours=deadline_hours, catalog=list(catalogs) or None, add_catalog=list(added) or None,
                     calibration=calibration)  # fmt: skip


class FtoptGroup(click.Group):
    """Click group that turns library errors into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; an FtoptError prints ``ftopt: error: <message>`` and exits 2."""
        try:
            return super().invoke(ctx)
        except FtoptError as exc:
            click.echo(f"ftopt: error: {exc}", err=True)
            ctx.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))


@click.group(cls=FtoptGroup, epilog=EXIT_CODES)
@click.version_option(package_name="ftopt")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how many, how long, configured how."""


@cli.command(epilog=SOLVE_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--objective", type=click.Choice([o.value for o in Objective]), help="Minimise cost or time first.")
@click.option("--budget", type=float, help="Budget amount in the scenario's budget currency.")
@click.option("--deadline-hours", type=float, help="Wall-clock limit in hours.")
@click.option("--top", "top_k", type=click.IntRange(1, 100), default=1, help="Also list the next best plans.")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0,
              help="Time limit for the whole answer, building the candidates and CP-SAT (s).")
@click.option("--launch-dir", type=click.Path(), help=exporters.launch_dir_help())
@catalog_option
@add_catalog_option
@calibration_option
@json_option
@html_option
def solve(scenario: str, objective: str | None, budget: float | None, deadline_hours: float | None, top_k: int,
          time_limit: float, launch_dir: str | None, catalogs: tuple[str, ...], added: tuple[str, ...],
          calibration: str | None, as_json: bool, html_path: str | None) -> None:  # fmt: skip
    """Find the optimal plan for SCENARIO (proven by CP-SAT); exit 1 when it has none."""
    ov = overrides(objective, budget, deadline_hours, catalogs, added, calibration)
    result = solve_scenario(scenario, ov, SolverSettings(time_limit_s=time_limit), top_k=top_k)
    outputs = []
    if launch_dir and result.launch:
        outputs.append(Output(Path(launch_dir), report.launch_files(result.launch), tuple(exporters.file_names())))
    if html_path:
        outputs.append(Output.file(html_path, report_html.solve_page(result)))
    write_outputs_atomic(outputs)  # all or none: a failed --html leaves no new launch files behind
    if as_json:
        click.echo(report.dumps(report.solve_json(result)), nl=False)
    else:
        report.print_solve(result, report.console())
    _no_plan_unless(result.relaxation is None)


@cli.command(epilog=ESTIMATE_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--gpu", help="GPU id or alias (ftopt catalog list); needed unless the scenario's plan: pins it.")
@click.option("--offer", help="Offer id (default: the cheapest offer for the GPU).")
@click.option("--cards", type=int, help="GPUs (= tp x pp x dp); needed unless pinned in the scenario.")
@click.option("--tp", type=int, help="Tensor-parallel degree (default 1).")
@click.option("--pp", type=int, help="Pipeline-parallel degree (default 1).")
@click.option("--zero", "zero_stage", type=click.IntRange(0, 3), help="ZeRO stage 0-3 (default 0).")
@click.option("--micro-batch", type=int, help="Sequences per GPU per forward pass; needed unless pinned.")
@click.option("--offload", type=click.Choice([o.value for o in Offload]), help="What moves to host RAM (default none).")
@click.option("--checkpointing", type=click.Choice([c.value for c in Checkpointing]),
              help="Activation checkpointing (default none).")  # fmt: skip
@click.option("--precision", type=click.Choice([p.value for p in Precision]),
              help="Compute precision (default bf16; without bf16 the engine's fallback, fp16 or fp32).")  # fmt: skip
@catalog_option
@add_catalog_option
@calibration_option
@json_option
@html_option
def estimate(scenario: str, catalogs: tuple[str, ...], added: tuple[str, ...], calibration: str | None,
             as_json: bool, html_path: str | None, **pins: Any) -> None:  # fmt: skip
    """Evaluate one configuration of SCENARIO: memory breakdown, fit, time and cost; exit 1 when it does not fit."""
    est = estimate_scenario(scenario, pins, overrides(catalogs=catalogs, added=added, calibration=calibration))
    if html_path:
        write_outputs_atomic([Output.file(html_path, report_html.estimate_page(est, scenario))])
    if as_json:
        click.echo(report.dumps(report.estimate_json(est)), nl=False)
    else:
        report.print_estimate(est, report.console())
    _no_plan_unless(est.status.value == "feasible")  # fits its cards and its node's host RAM


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
@click.option("--plot", "plot_path", type=click.Path(), help="Draw the front to a .png or .svg file.")
@click.option("--csv", "csv_path", type=click.Path(), help="Write the front as CSV to this file.")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0, help="CP-SAT limit per stage (s).")
@catalog_option
@add_catalog_option
@calibration_option
@json_option
@html_option
def pareto(scenario: str, budget: float | None, deadline_hours: float | None, plot_path: str | None,
           csv_path: str | None, time_limit: float, catalogs: tuple[str, ...], added: tuple[str, ...],
           calibration: str | None, as_json: bool, html_path: str | None) -> None:  # fmt: skip
    """Every non-dominated plan of SCENARIO, cost versus wall-clock hours (each proven by CP-SAT); exit 1 if none."""
    from optimizer.solve.pareto import pareto_scenario

    ov = overrides(None, budget, deadline_hours, catalogs, added, calibration)
    result = pareto_scenario(scenario, ov, SolverSettings(time_limit_s=time_limit))
    outputs = []
    if plot_path:
        outputs.append(Output.file(plot_path, report_front.plot_front(result, plot_path)))
    if csv_path:
        outputs.append(Output.file(csv_path, report_front.pareto_csv(result)))
    if html_path:
        outputs.append(Output.file(html_path, report_html.pareto_page(result)))
    write_outputs_atomic(outputs)  # all or none
    if as_json:
        click.echo(report.dumps(report_front.pareto_json(result)), nl=False)
    else:
        report_front.print_pareto(result, report.console())
    _no_plan_unless(bool(result.estimates))


def _check_batch_outputs(output: str | None, html_path: str | None) -> None:
    """Before any scenario is solved: ``-o`` names a .jsonl or .csv (exit 2), ``--html`` can be written (exit 3).

    The rows stream to ``-o`` as they finish and the page is written after the last one, so an unwritable page
    found only then would come after the whole batch.
    """
    from optimizer.solve.batch import output_format

    if output:
        output_format(output)
    if html_path:
        check_writable(html_path)  # before the batch: the page is written after its last row


@cli.command(epilog=BATCH_EXAMPLES)
@click.argument("scenarios", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(), help="Results .jsonl or .csv (resumes if present).")
@click.option("--workers", type=click.IntRange(1, 4096), help="Processes (default: the cores available).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", help="Process pool or Ray.")
@click.option("--address", help="Ray cluster address (default: start a local Ray).")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=10.0,
              help="Time limit per scenario, building and CP-SAT (s).")
@click.option("--strict", is_flag=True, help=f"Exit {EXIT_NO_PLAN} when any row is an error or infeasible.")
@calibration_option
@html_option
def batch(scenarios: tuple[str, ...], output: str | None, workers: int | None, backend: str, address: str | None,
          time_limit: float, strict: bool, calibration: str | None, html_path: str | None) -> None:  # fmt: skip
    """Solve every scenario in SCENARIOS (files, folders, globs); one result row per scenario."""
    from optimizer.solve.batch import Backend, BatchSummary, expand, run_batch, sigint_ignored

    paths = expand(scenarios)
    _check_batch_outputs(output, html_path)
    err = Console(stderr=True)
    summary: BatchSummary | None = None
    try:
        with report_batch.batch_progress(err) as (on_start, on_row):
            summary = run_batch(paths, output, workers, Backend(backend), address,
                                SolverSettings(time_limit_s=time_limit), on_start, on_row, calibration)  # fmt: skip
    except KeyboardInterrupt:
        if summary is None:  # before run_batch took charge of Ctrl-C: nothing was solved
            raise
        # Ctrl-C after the last row: the batch is complete and ends as a complete one, summary included
    with sigint_ignored():
        report_batch.print_batch_summary(summary, output, report.console() if output is None else err, html_path)
    if summary.interrupted:
        sys.exit(EXIT_TERMINATED if summary.terminated else EXIT_INTERRUPTED)
    _no_plan_unless(not strict or not (summary.counts.get("error") or summary.counts.get("infeasible")))


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
@catalog_read_option
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
@catalog_read_option
@json_option
def catalog_show(ident: str, catalogs: tuple[str, ...], as_json: bool) -> None:
    """Every field of the GPU (id or alias) or offer ID, with sources and dates."""
    catalog = load_catalog(list(catalogs) or None)
    entry = report_catalog.catalog_entry(catalog, ident)
    if as_json:
        click.echo(report.dumps(report_catalog.entry_json(entry, catalog)), nl=False)
    else:
        report_catalog.print_entry(entry, report.console(), catalog)


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


cli.add_command(calibrate_command)
cli.add_command(probe_command)
cli.add_command(portfolio_command)


# click >= 8.2 raises this usage error for a group run without a subcommand; its message is the whole help text
NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    e for e in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if e is not None)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors (ours and click's usage errors) print one line and exit 2.

    A command group run without a subcommand (``ftopt``, ``ftopt catalog``) prints its help as click does, on
    several lines to stderr, and exits 2: no command ran, a usage error (``--help`` prints it to stdout, exit 0).
    """
    try:
        code = cli.main(args=argv, prog_name="ftopt", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("ftopt: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except NO_ARGS_IS_HELP as exc:
        click.echo(str(exc), err=True)  # the help, as click >= 8.2 prints it
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        click.echo(f"ftopt: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

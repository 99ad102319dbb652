"""The ``ftopt`` command line: parse, call one library function, hand the result to report.py.

Every FtoptError becomes one line on stderr and exit status 2; nothing is written when a command fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from optimizer import report
from optimizer.errors import FtoptError
from optimizer.planner import Overrides, estimate_scenario, solve_scenario
from optimizer.schema import Checkpointing, Objective, Offload, Precision
from optimizer.solver import SolverSettings

SOLVE_EXAMPLES = """\b
Examples:
  ftopt solve scenarios/70b.yaml
  ftopt solve scenarios/7b-qlora.yaml --objective time --json
  ftopt solve scenarios/70b.yaml --budget 20000 --deadline-hours 72 --top 3
"""
ESTIMATE_EXAMPLES = """\b
Examples:
  ftopt estimate scenarios/7b-lora.yaml --gpu RTX-4090 --cards 1 --micro-batch 2 --checkpointing full
  ftopt estimate scenarios/70b.yaml --gpu A100-80G --cards 16 --tp 1 --zero 3 --micro-batch 1 --json
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
@catalog_option
@json_option
def solve(scenario: str, objective: str | None, budget: float | None, deadline_hours: float | None, top_k: int,
          time_limit: float, catalogs: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Find the optimal plan for SCENARIO (proven by CP-SAT)."""
    ov = Overrides(Objective(objective) if objective else None, budget, deadline_hours, list(catalogs) or None)
    result = solve_scenario(scenario, ov, SolverSettings(time_limit_s=time_limit), top_k=top_k)
    if as_json:
        click.echo(report.dumps(report.solve_json(result)), nl=False)
    else:
        report.print_solve(result, Console())


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
        report.print_estimate(est, Console())


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

"""The ``ftopt portfolio`` command: many jobs over months on owned, bought and rented cards (issue 15)."""

from __future__ import annotations

import click

from optimizer.inputs.atomic import Output, write_outputs_atomic
from optimizer.inputs.errors import EXIT_BAD_INPUT, EXIT_NO_PLAN
from optimizer.portfolio.plan import PortfolioResult, plan_portfolio
from optimizer.portfolio.schedule import Settings
from optimizer.report import html as report_html
from optimizer.report import plan as report
from optimizer.report import portfolio as report_portfolio

PORTFOLIO_EXAMPLES = f"""\b
Examples:
  ftopt portfolio portfolios/team-q1.yaml
  ftopt portfolio portfolios/team-q1.yaml --json --plot schedule.png
  ftopt portfolio portfolios/team-q1.yaml --time-limit 120

\b
Exit status:
  0    every job occurrence has a plan (status optimal or feasible)
  {EXIT_NO_PLAN}    some job occurrence has no plan: status infeasible (text and --json alike)
  {EXIT_BAD_INPUT}    bad input, in the portfolio or in a job's scenario: one line naming the file and field
"""


def portfolio_exit(result: PortfolioResult) -> int:
    """The exit status of an answered portfolio: EXIT_NO_PLAN when some occurrence has no plan, else 0.

    A portfolio is answered only when every occurrence of every job has a run inside its window; an infeasible one
    (an occurrence that fits nowhere, or owned and buyable cards that cannot carry what only they can run) is an
    answer without a plan, as an infeasible ``ftopt solve`` is.
    """
    return EXIT_NO_PLAN if result.status == "infeasible" else 0


@click.command("portfolio", epilog=PORTFOLIO_EXAMPLES)
@click.argument("file", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON (docs/portfolio.md).")
@click.option("--plot", "plot_path", type=click.Path(), help="Draw the schedule to a .png or .svg.")
@click.option("--time-limit", type=click.FloatRange(0.001, 3600), default=60.0, help="CP-SAT time limit (s).")
@click.option("--html", "html_path", type=click.Path(), help="Also write a self-contained HTML report.")
def portfolio(file: str, as_json: bool, plot_path: str | None, time_limit: float, html_path: str | None) -> None:
    """Schedule every job of a portfolio FILE at least cost: when, on what, bought or rented (CP-SAT).

    Exit 1 when some job occurrence has no plan (status infeasible).
    """
    result = plan_portfolio(file, Settings(time_limit_s=time_limit))
    outputs = []
    if plot_path:
        outputs.append(Output.file(plot_path, report_portfolio.plot_schedule(result, plot_path)))
    if html_path:
        outputs.append(Output.file(html_path, report_html.portfolio_page(result, file)))
    write_outputs_atomic(outputs)  # all or none
    if as_json:
        click.echo(report.dumps(report_portfolio.portfolio_json(result)), nl=False)
    else:
        report_portfolio.print_portfolio(result, report.console())
    click.get_current_context().exit(portfolio_exit(result))

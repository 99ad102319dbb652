"""``ftopt calibrate`` and ``ftopt probe``: measure before you commit (registered in optimizer/cli/commands.py)."""

from __future__ import annotations

import click

from optimizer.inputs.errors import EXIT_NO_PLAN
from optimizer.measure.calibrate import DEFAULT_MAX_FACTOR, DEFAULT_PRIOR_WEIGHT, calibrate
from optimizer.measure.probe import DEFAULT_STEPS, DEFAULT_WARMUP, probe_scenario
from optimizer.report import measure as report_measure
from optimizer.report import plan as report
from optimizer.solve.planner import Overrides

CALIBRATE_EXAMPLES = """\b
Examples:
  ftopt calibrate my-probe/measurement.yaml -o my-calibration.yaml
  ftopt calibrate out/trainer_state.json nvidia-smi.csv --scenario my-run.yaml -o my-calibration.yaml
  ftopt calibrate runs/*.yaml --prior-weight 2 --json
  ftopt solve scenarios/7b-lora.yaml --calibration my-calibration.yaml
"""
PROBE_EXAMPLES = """\b
Examples:
  ftopt probe scenarios/7b-lora.yaml --out my-probe/
  python my-probe/probe.py --tiny       # CPU smoke run of the same script
  ftopt probe scenarios/14b-lora.yaml --out my-probe14/ --steps 30
"""


@click.command("calibrate", epilog=CALIBRATE_EXAMPLES)
@click.argument("measurements", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", type=click.Path(), help="Write the calibration overlay here.")
@click.option("--scenario", type=click.Path(), help="The scenario (pinned plan) that produced imported logs.")
@click.option("--prior-weight", type=click.FloatRange(0, 1000, min_open=True), default=DEFAULT_PRIOR_WEIGHT,
              show_default=True, help="Shrinkage: the shipped model counts as this many measurements.")
@click.option("--max-factor", type=click.FloatRange(1, 100, min_open=True), default=DEFAULT_MAX_FACTOR,
              show_default=True, help="No group moves by more than this factor either way.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-measurement errors and the overlay as JSON.")
def calibrate_command(measurements: tuple[str, ...], output: str | None, scenario: str | None, prior_weight: float,
                      max_factor: float, as_json: bool) -> None:  # fmt: skip
    """Fit a calibration overlay to MEASUREMENTS and report each one's prediction error before and after.

    MEASUREMENTS: case files (the probe's output, the reference cases), HF trainer_state.json, torchtune metric
    logs, nvidia-smi memory.used captures (logs need --scenario).
    """
    result = calibrate(list(measurements), scenario, prior_weight, max_factor, output)
    if as_json:
        click.echo(report.dumps(report_measure.calibration_json(result)), nl=False)
    else:
        report_measure.print_calibration(result, output if result.fitted else None, report.console())
    if not result.fitted:  # an answer without an overlay: the rows above say why each measurement was not used
        click.echo(f"ftopt: nothing to fit: none of the {len(measurements)} measurement file(s) gave a usable "
                   "figure (see each one's note); no overlay written", err=True)  # fmt: skip
        click.get_current_context().exit(EXIT_NO_PLAN)


@click.command("probe", epilog=PROBE_EXAMPLES)
@click.argument("scenario", type=click.Path())
@click.option("--out", "out_dir", required=True, type=click.Path(), help="Folder for probe.py.")
@click.option("--steps", type=click.IntRange(1, 10_000), default=DEFAULT_STEPS, show_default=True,
              help="Measured steps.")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=DEFAULT_WARMUP, show_default=True,
              help="Warm-up steps (not measured).")
@click.option("--calibration", type=click.Path(), help="Calibration overlay to plan with.")
def probe_command(scenario: str, out_dir: str, steps: int, warmup: int, calibration: str | None) -> None:
    """Plan SCENARIO, then write the cheapest short trial of its per-GPU configuration to OUT (probe.py).

    Exit 1, as solve, when SCENARIO has no plan (infeasible): nothing is written.
    """
    result = probe_scenario(scenario, out_dir, steps, warmup, Overrides(calibration=calibration))
    report_measure.print_probe(result, report.console())

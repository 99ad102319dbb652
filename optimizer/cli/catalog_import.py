"""``ftopt catalog import skypilot``: SkyPilot catalog rows to an ftopt offers file (registered in cli.py)."""

from __future__ import annotations

import datetime

import click

from optimizer.inputs.atomic import write_atomic
from optimizer.inputs.import_skypilot import import_text

IMPORT_EXAMPLES = """\b
Examples:
  ftopt catalog import skypilot vms.csv --cloud aws -o aws.yaml
  ftopt catalog import skypilot gcp.csv --cheapest-region -o gcp.yaml --as-of 2026-12-01
"""


@click.group("import", epilog=IMPORT_EXAMPLES)
def import_group() -> None:
    """Turn other tools' catalogs into ftopt offers files."""


@import_group.command("skypilot", epilog=IMPORT_EXAMPLES)
@click.argument("csv_files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--cloud", help="aws, gcp, lambda, runpod, vast (default: the file name).")
@click.option("--cheapest-region", is_flag=True, help="Keep the cheapest region of each instance type.")
@click.option("--as-of", "as_of", type=click.DateTime(formats=["%Y-%m-%d"]), help="Date of the rows (default today).")
@click.option("-o", "--output", required=True, type=click.Path(), help="Offers YAML file to write.")
def skypilot(csv_files: tuple[str, ...], cloud: str | None, cheapest_region: bool, as_of: datetime.datetime | None,
             output: str) -> None:  # fmt: skip
    """Offers from SkyPilot vms.csv files of one cloud: whole instances, host RAM, spot; suspect rows skipped."""
    text, result = import_text(list(csv_files), output, cloud, cheapest_region, as_of.date() if as_of else None)
    write_atomic(output, text)
    skipped = sum(result.skipped.values())
    click.echo(f"ok: {result.offers} offers written to {output}; {skipped} rows skipped")
    for reason, count in result.skipped.items():
        click.echo(f"  skipped {count}: {reason}")

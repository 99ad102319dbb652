"""Rendering of batch runs: progress bar, results table, summary."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from optimizer.inputs.terminal import escape
from optimizer.solve.batch import BatchSummary, row_error, sigint_ignored

# ------------------------------------------------------------------------------------------------ batch

MAX_ERRORS_SHOWN = 20  # the summary lists this many failures; the output file holds them all


@contextlib.contextmanager
def batch_progress(console: Console) -> Iterator[tuple[Callable[[int, int], None], Callable[[dict], None]]]:
    """A progress bar (count, rate, ETA) on ``console``; yields the (on_start, on_row) hooks of run_batch.

    The bar starts when the batch does (``on_start``: the output locked and read), so an error before that, such
    as another batch holding ``-o``, is the only line on the console.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class _Rate(TextColumn):
        def render(self, task: Any) -> Any:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.1f} scen/s" if speed else "- scen/s", style="progress.data.speed")

    bar = Progress(TextColumn("solving"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(), _Rate(""),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                   auto_refresh=False, transient=False)  # fmt: skip
    state: dict[str, Any] = {}

    def on_start(todo: int, skipped: int) -> None:
        if skipped:
            console.print(f"resume: {skipped} scenario{'s' if skipped != 1 else ''} already solved, skipped")
        state["task"] = bar.add_task("batch", total=todo)
        bar.start()
        bar.refresh()

    def on_row(row: dict) -> None:
        bar.update(state["task"], advance=1)
        bar.refresh()

    try:
        yield on_start, on_row
    finally:
        with sigint_ignored():  # the terminal is restored even when Ctrl-C comes as the bar closes
            if "task" in state:
                bar.stop()


def batch_table(rows: list[dict[str, Any]]) -> Table:
    """Batch rows as a terminal table (used when no output file is given)."""
    table = Table(title="Batch results", show_edge=False)
    for col in ("scenario", "status", "gpu", "cards", "layout", "hours", "cost", "error"):
        table.add_column(col, justify="right" if col in ("cards", "hours", "cost") else "left")
    for r in rows:
        solved = r["gpu"] not in (None, "")
        layout = f"tp{r['tp']} dp{r['dp']} Z{r['zero_stage']}/{r['offload']} mb{r['micro_batch']}" if solved else ""
        cost = f"{float(r['cost']):,.2f} {r['currency']}" if solved else ""
        hours = f"{float(r['hours']):,.2f}" if solved else ""
        table.add_row(escape(str(r["scenario"])), str(r["status"]), escape(r["gpu"] or ""), str(r["cards"] or ""),
                      layout, hours, cost, escape(row_error(r)))  # fmt: skip
    return table


def print_batch_summary(summary: BatchSummary, output: str | None, console: Console, html: str | None = None) -> None:
    """Counts by status, throughput, every error with its one-line message, and where the rows are.

    The summary line counts the scenarios ("1 scenario", "2 scenarios") and, with an output file, those reused from
    it ("skipped N already in the output") and, when any, those whose row was solved from other inputs and so solved
    again ("re-solved N changed"); without one nothing can be reused and the count is left out.

    With ``html`` (``--html FILE``) the rows are also written as a page (optimizer/report/html).
    """
    if html:
        from optimizer.report import html as report_html

        report_html.write_page(html, report_html.batch_page(summary.rows))
    if output is None and summary.rows:
        console.print(batch_table(summary.rows))
    counts = ", ".join(f"{n} {s}" for s, n in summary.counts.items() if n)
    rate = summary.solved / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    head = "[bold yellow]Interrupted[/bold yellow]" if summary.interrupted else "[bold]Done[/bold]"
    done = f"solved {summary.solved} in {summary.elapsed_s:.1f} s ({rate:,.1f}/s)"
    changed = f", re-solved {summary.changed} changed" if summary.changed else ""
    reused = f", skipped {summary.skipped} already in the output{changed}" if output is not None else ""
    scenarios = f"{summary.total} scenario{'' if summary.total == 1 else 's'}"
    console.print(f"{head}: {scenarios} ({counts or 'none finished'}); {done}{reused}")
    errors = summary.errors
    for r in errors[:MAX_ERRORS_SHOWN]:
        console.print(f"[red]error[/red] {escape(str(r['scenario']))}: {escape(row_error(r))}", soft_wrap=True)
    if len(errors) > MAX_ERRORS_SHOWN:
        console.print(f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors (rows with status error in the output)")
    if output is not None:
        again = "; rerun the same command to resume" if summary.interrupted else ""
        console.print(f"Results: {output}{again}")

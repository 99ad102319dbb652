"""Rendering: terminal tables (rich), JSON documents, atomic file writes. No modelling happens here."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from optimizer.batch import BatchSummary
from optimizer.catalog import Catalog
from optimizer.errors import InputError, did_you_mean
from optimizer.pareto import ParetoResult
from optimizer.planner import SolveResult
from optimizer.schema import Estimate, Gpu, Offer, Term
from optimizer.validator import CatalogCounts

GIB = 2**30
MEMORY_ROWS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")


def estimate_json(est: Estimate) -> dict[str, Any]:
    """The DESIGN.md section 6 document: status, plan, memory, time, cost."""
    return est.model_dump(mode="json")


def solve_json(result: SolveResult) -> dict[str, Any]:
    """JSON of a solve: the contract's five keys, plus ``explanation`` when infeasible."""
    doc = estimate_json(result.best)
    if result.relaxation is not None:
        r = result.relaxation
        doc["explanation"] = {
            "binding": r.binding,
            "message": r.message,
            "budget_needed": r.budget_needed,
            "deadline_needed_hours": r.deadline_needed_hours,
            "memory_needed_bytes": r.memory_needed_bytes,
            "gpus_that_fit": r.gpus_that_fit,
            "currency": result.currency,
        }
    if result.best.status.value == "feasible" and result.bound is not None:  # stopped by --time-limit
        objective = result.scenario.objective.value
        doc["bound"] = {"objective": objective, "value": result.bound,
                        "unit": result.currency if objective == "cost" else "hours"}  # fmt: skip
    return doc


def dumps(doc: Any) -> str:
    """Canonical JSON text: sorted keys off (contract order), fixed separators, trailing newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so readers never see half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def _plan_line(est: Estimate) -> str:
    p = est.plan
    assert p is not None
    return (
        f"{p.cards} x {p.gpu} ({p.nodes} node{'s' if p.nodes > 1 else ''}, offer {p.offer}); tp={p.tp} pp={p.pp} "
        f"dp={p.dp}; ZeRO-{p.zero_stage} offload={p.offload.value}; micro_batch={p.micro_batch} "
        f"grad_accum={p.grad_accum}; {p.precision.value}; {p.optimizer.value}; checkpointing={p.checkpointing.value}"
    )


def memory_table(est: Estimate) -> Table:
    """Per-GPU memory breakdown against capacity."""
    m = est.memory
    assert m is not None
    table = Table(title="Per-GPU memory", show_edge=False)
    table.add_column("component")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    for key in MEMORY_ROWS:
        value = getattr(m, key)
        table.add_row(key, _gib(value), f"{100 * value / max(m.total, 1):.0f}%")
    table.add_row("total", _gib(m.total), f"{100 * m.total / m.capacity:.0f}% of {_gib(m.capacity)}", style="bold")
    if m.cpu_offload:
        table.add_row("host RAM (offload, per node)", _gib(m.cpu_offload), "")
    return table


def estimate_lines(est: Estimate) -> list[Any]:
    """Renderables for one plan: decision line, memory table, time and cost lines."""
    t, c, p = est.time, est.cost, est.plan
    assert t is not None and c is not None and p is not None and est.memory is not None
    units = ", ".join(f"{v} {k}{'s' if v != 1 else ''}" for k, v in p.billed_units.items())
    fits = "fits" if est.memory.fits else "DOES NOT FIT"
    return [
        f"[bold]Plan[/bold] ({est.status.value}): {_plan_line(est)}",
        memory_table(est),
        f"Memory: {fits}. Time: {t.hours:,.1f} h wall clock, {t.steps:,} steps of {t.step_seconds:.2f} s, "
        f"{t.tokens_per_second:,.0f} tokens/s, MFU {100 * t.mfu:.1f}%",
        f"Cost: {c.total:,.2f} {c.currency}"
        + (f" (= {c.budget_currency_total:,.2f} in budget currency)" if c.budget_currency_total is not None else "")
        + f"; billed {units} per card x {p.cards} card{'s' if p.cards > 1 else ''} ({p.term})",
    ]


def alternatives_table(result: SolveResult) -> Table:
    """The best plan on each other GPU type, for comparison."""
    table = Table(title="Best plan on each other GPU type", show_edge=False)
    for col in ("gpu", "cards", "layout", "hours", f"cost ({result.currency})", "per-GPU memory"):
        table.add_column(col, justify="right" if col not in ("gpu", "layout") else "left")
    for est in sorted(result.alternatives, key=lambda e: (_cost(e), e.plan.gpu if e.plan else "")):
        p, m, t = est.plan, est.memory, est.time
        assert p is not None and m is not None and t is not None
        layout = f"tp{p.tp} dp{p.dp} Z{p.zero_stage}/{p.offload.value} mb{p.micro_batch} ck={p.checkpointing.value}"
        table.add_row(
            p.gpu,
            str(p.cards),
            layout,
            f"{t.hours:,.1f}",
            f"{_cost(est):,.2f}",
            f"{_gib(m.total)} / {_gib(m.capacity)}",
        )
    return table


def _cost(est: Estimate) -> float:
    c = est.cost
    assert c is not None
    return c.budget_currency_total if c.budget_currency_total is not None else c.total


def print_solve(result: SolveResult, console: Console) -> None:
    """Human-readable solve result."""
    sc = result.scenario
    console.print(f"[bold]{sc.name}[/bold]: {sc.method.value} fine-tuning, objective {sc.objective.value}, "
                  f"{result.candidates} candidate plans after pruning ({result.enumerated:,} configurations evaluated)")  # fmt: skip
    if result.relaxation is not None:
        console.print(f"[bold red]Infeasible[/bold red]: {result.relaxation.message}")
        return
    for item in estimate_lines(result.best):
        console.print(item)
    proof = "proven optimal by CP-SAT" if result.best.status.value == "optimal" else (
        f"best found within the time limit; proven bound {result.bound:g}")
    console.print(f"Optimality: {proof}")
    for i, est in enumerate(result.top[1:], start=2):
        console.print(f"#{i}: {_plan_line(est)}; {est.time.hours:,.1f} h; {_cost(est):,.2f} {result.currency}")  # type: ignore[union-attr]
    if result.alternatives:
        console.print(alternatives_table(result))


def print_estimate(est: Estimate, console: Console) -> None:
    """Human-readable single estimate."""
    for item in estimate_lines(est):
        console.print(item)


# ------------------------------------------------------------------------------------------------ pareto fronts

PARETO_CSV_FIELDS = ("point", "chosen", "status", "gpu", "offer", "cards", "nodes", "tp", "pp", "dp", "zero_stage",
                     "offload", "micro_batch", "grad_accum", "precision", "optimizer", "checkpointing", "term",
                     "cost", "currency", "hours", "memory_total_bytes")  # fmt: skip


def pareto_status(result: ParetoResult) -> str:
    """Infeasible when the front is empty, feasible when a time limit left a point unproven, else optimal."""
    if not result.estimates:
        return "infeasible"
    return "feasible" if any(e.status.value == "feasible" for e in result.estimates) else "optimal"


def pareto_json(result: ParetoResult) -> dict[str, Any]:
    """The front as JSON: axes, limits and every point as a DESIGN.md section 6 document with cost and hours."""
    doc: dict[str, Any] = {
        "scenario": result.scenario.name,
        "status": pareto_status(result),
        "objective": result.scenario.objective.value,
        "currency": result.currency,
        "budget": result.budget,
        "deadline_hours": result.deadline_hours,
        "chosen": result.chosen,
        "points": [
            {"cost": c, "hours": h, "chosen": i == result.chosen, **estimate_json(e)}
            for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True))
        ],
    }
    if result.relaxation is not None:
        doc["explanation"] = {"binding": result.relaxation.binding, "message": result.relaxation.message}
    return doc


def pareto_csv(result: ParetoResult) -> str:
    """The front as CSV text, one row per point, cheapest first."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PARETO_CSV_FIELDS)
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        p, m = e.plan, e.memory
        assert p is not None and m is not None
        writer.writerow([i, int(i == result.chosen), e.status.value, p.gpu, p.offer, p.cards, p.nodes, p.tp, p.pp,
                         p.dp, p.zero_stage, p.offload.value, p.micro_batch, p.grad_accum, p.precision.value,
                         p.optimizer.value, p.checkpointing.value, p.term, c, result.currency, h, m.total])  # fmt: skip
    return buf.getvalue()


def pareto_table(result: ParetoResult) -> Table:
    """The front as a terminal table, cheapest first; the plan ``solve`` chooses is marked."""
    table = Table(title=f"Cost versus time: {len(result.estimates)} non-dominated plans", show_edge=False)
    for col in ("", "#", "gpu", "cards", "layout", "hours", f"cost {result.currency}", "GiB/GPU"):
        table.add_column(col, justify="left" if col in ("", "gpu", "layout") else "right")
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        p, m = e.plan, e.memory
        assert p is not None and m is not None
        layout = f"tp{p.tp} dp{p.dp} Z{p.zero_stage}/{p.offload.value} mb{p.micro_batch} ck={p.checkpointing.value}"
        chosen = i == result.chosen
        table.add_row("*" if chosen else "", str(i), p.gpu, str(p.cards), layout, f"{h:,.2f}", f"{c:,.2f}",
                      f"{m.total / GIB:.0f}/{m.capacity / GIB:.0f}", style="bold" if chosen else None)  # fmt: skip
    return table


def print_pareto(result: ParetoResult, console: Console) -> None:
    """Human-readable front: header, table, proof line (or the infeasibility explanation)."""
    sc = result.scenario
    console.print(f"[bold]{escape(str(sc.name))}[/bold]: {sc.method.value} fine-tuning, "
                  f"{result.candidates} candidate plans, "
                  f"{result.solves} CP-SAT solves (epsilon-constraint on hours)")  # fmt: skip
    if not result.estimates:
        message = result.relaxation.message if result.relaxation else "no plan meets the constraints"
        console.print(f"[bold red]Infeasible[/bold red]: {escape(message)}")
        return
    console.print(pareto_table(result))
    proof = "each point proven optimal for its time bound" if pareto_status(result) == "optimal" else (
        "some points are the best found within the time limit, not proven")  # fmt: skip
    console.print(f"Front: {proof}; * = the plan `ftopt solve` returns (objective {sc.objective.value})")


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Binary sibling of :func:`write_atomic`: temporary file in the same folder, then a rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


OFF_SCALE = 3.0  # plot_front draws a budget or deadline line only up to this multiple of the front's largest value


def plot_front(result: ParetoResult, path: str | Path) -> None:
    """Draw the front (hours versus cost) to a PNG or SVG file.

    Points are labelled GPU x cards, the chosen plan is ringed in red, budget and deadline are dashed lines.
    Needs matplotlib (``pip install 'ftopt[plot]'``); the figure is drawn with the Agg canvas (no display, no
    pyplot state), so it works in workers and on servers.
    """
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise InputError(str(path), "--plot", f"unknown plot format '{fmt or path}'; use a .png or .svg file")
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import StrMethodFormatter
    except ImportError:
        raise InputError("--plot", "", "matplotlib is not installed; pip install 'ftopt[plot]'") from None
    fig = Figure(figsize=(9, 6), dpi=110)
    ax = fig.add_subplot()
    by_time = sorted(zip(result.hours, result.costs, strict=True))  # attainable cost at each time: a staircase
    ax.step([h for h, _ in by_time], [c for _, c in by_time], where="post", color="0.75", linewidth=1, zorder=1)
    ax.scatter(result.hours, result.costs, color="tab:blue", s=28, zorder=3, label="non-dominated plan")
    for i, (e, c, h) in enumerate(zip(result.estimates, result.costs, result.hours, strict=True)):
        assert e.plan is not None
        offset, align = ((5, 4), "left") if i % 2 == 0 else ((-5, -11), "right")  # alternate sides: fewer overlaps
        ax.annotate(f"{e.plan.gpu} x{e.plan.cards}", (h, c), textcoords="offset points", xytext=offset,
                    ha=align, fontsize=8)  # fmt: skip
        if i == result.chosen:
            ax.scatter([h], [c], s=160, facecolors="none", edgecolors="tab:red", linewidths=2, zorder=4,
                       label=f"chosen (objective {result.scenario.objective.value})")  # fmt: skip
    # a limit far beyond the front would squash it: drawn only within OFF_SCALE x the largest value, else named
    if result.budget is not None:
        label = f"budget {result.budget:,.0f} {result.currency}"
        if result.budget <= OFF_SCALE * max(result.costs, default=result.budget):
            ax.axhline(result.budget, color="tab:green", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (far above)")
    if result.deadline_hours is not None:
        label = f"deadline {result.deadline_hours:g} h"
        if result.deadline_hours <= OFF_SCALE * max(result.hours, default=result.deadline_hours):
            ax.axvline(result.deadline_hours, color="tab:orange", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=f"{label} (far right)")
    spread = max(result.costs, default=1) / max(min(result.costs, default=1), 1e-9)
    if spread > 20:
        ax.set_yscale("log")
    if max(result.hours, default=1) / max(min(result.hours, default=1), 1e-9) > 20:
        ax.set_xscale("log")
    ax.margins(x=0.08, y=0.08)
    ax.set_xlabel("wall-clock hours")
    ax.set_ylabel(f"total cost ({result.currency})")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_title(f"{result.scenario.name}: cost versus time ({len(result.estimates)} non-dominated plans)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, metadata={"Software": None} if fmt == "png" else {"Date": None})
    write_bytes_atomic(path, buf.getvalue())


# ------------------------------------------------------------------------------------------------ batch

MAX_ERRORS_SHOWN = 20  # the summary lists this many failures; the output file holds them all


@contextlib.contextmanager
def batch_progress(console: Console) -> Iterator[tuple[Callable[[int, int], None], Callable[[dict], None]]]:
    """A progress bar (count, rate, ETA) on ``console``; yields the (on_start, on_row) hooks of run_batch."""
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
        bar.refresh()

    def on_row(row: dict) -> None:
        bar.update(state["task"], advance=1)
        bar.refresh()

    with bar:
        yield on_start, on_row


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
        table.add_row(str(r["scenario"]), str(r["status"]), r["gpu"] or "", str(r["cards"] or ""), layout, hours,
                      cost, r["error"] or "")  # fmt: skip
    return table


def print_batch_summary(summary: BatchSummary, output: str | None, console: Console) -> None:
    """Counts by status, throughput, every error with its one-line message, and where the rows are."""
    if output is None and summary.rows:
        console.print(batch_table(summary.rows))
    counts = ", ".join(f"{n} {s}" for s, n in summary.counts.items() if n)
    rate = summary.solved / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    head = "[bold yellow]Interrupted[/bold yellow]" if summary.interrupted else "[bold]Done[/bold]"
    done = f"solved {summary.solved} in {summary.elapsed_s:.1f} s ({rate:,.1f}/s)"
    console.print(f"{head}: {summary.total} scenarios ({counts or 'none finished'}); {done}, "
                  f"skipped {summary.skipped} already in the output")  # fmt: skip
    errors = summary.errors
    for r in errors[:MAX_ERRORS_SHOWN]:
        console.print(f"[red]error[/red] {escape(str(r['scenario']))}: {escape(str(r['error']))}", soft_wrap=True)
    if len(errors) > MAX_ERRORS_SHOWN:
        console.print(f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors (rows with status error in the output)")
    if output is not None:
        again = "; rerun the same command to resume" if summary.interrupted else ""
        console.print(f"Results: {output}{again}")


# ------------------------------------------------------------------------------------------------ catalog and models


def _hourly_in_usd(catalog: Catalog, offer: Offer) -> float:
    """The offer's hourly price in USD, for ranking only (the raw amount when no rate is known)."""
    rate = catalog.rate(offer.currency, "USD")
    return offer.prices[Term.hour].amount * (rate.rate if rate else 1.0)


def gpu_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per GPU type: memory, dense bf16 TFLOPS, offers, cheapest hourly price (in its own currency)."""
    rows = []
    for gpu in catalog.gpus.values():
        offers = [o for o in catalog.offers if o.gpu == gpu.id]
        hourly = [o for o in offers if Term.hour in o.prices]
        cheapest = min(hourly, key=lambda o: (_hourly_in_usd(catalog, o), o.id)) if hourly else None
        rows.append({
            "gpu": gpu.id, "memory_gib": gpu.memory_gib, "bf16_tflops": gpu.bf16_tflops, "offers": len(offers),
            "cheapest_hourly": cheapest.prices[Term.hour].amount if cheapest else None,
            "currency": cheapest.currency if cheapest else None, "cheapest_offer": cheapest.id if cheapest else None,
        })  # fmt: skip
    return rows


def gpu_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of :func:`gpu_rows` as a terminal table."""
    table = Table(title="GPU types", show_edge=False)
    table.add_column("gpu", no_wrap=True, min_width=max((len(r["gpu"]) for r in rows), default=3))
    for col in ("memory GiB", "bf16 TFLOPS", "offers", "cheapest per card-hour"):
        table.add_column(col, justify="right")
    table.add_column("offer", overflow="fold")
    for r in rows:
        price = f"{r['cheapest_hourly']:,.4g} {r['currency']}" if r["cheapest_hourly"] is not None else "-"
        tflops = f"{r['bf16_tflops']:g}" if r["bf16_tflops"] is not None else "- (no bf16)"
        table.add_row(r["gpu"], f"{r['memory_gib']:g}", tflops, str(r["offers"]), price, r["cheapest_offer"] or "-")
    return table


def catalog_entry(catalog: Catalog, ident: str) -> Gpu | Offer:
    """The GPU (id or alias, any case) or the offer (id) called ``ident``; InputError with the nearest names."""
    offers = {o.id: o for o in catalog.offers}
    if ident.lower() in offers:
        return offers[ident.lower()]
    names = {n.lower(): g for g in catalog.gpus.values() for n in [g.id, *g.aliases]}
    if ident.lower() in names:
        return names[ident.lower()]
    known = [*sorted(catalog.gpus), *sorted(offers)]
    raise InputError("catalog", "ID", f"no GPU or offer '{ident}'{did_you_mean(ident, known)}; see ftopt catalog list")


def entry_json(entry: Gpu | Offer) -> dict[str, Any]:
    """All fields of a catalog entry, with their sources, as JSON-ready data."""
    return {"kind": "gpu" if isinstance(entry, Gpu) else "offer", **entry.model_dump(mode="json")}


def print_entry(entry: Gpu | Offer, console: Console) -> None:
    """Every field of a GPU or an offer, one per line; prices with their source and date."""
    doc = entry_json(entry)
    console.print(f"[bold]{doc.pop('kind')} {escape(doc['id'])}[/bold]")
    prices = doc.pop("prices", None)
    for key, value in doc.items():
        if value is not None and value != []:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            console.print(f"  {key}: {escape(shown)}", soft_wrap=True)
    for term, price in (prices or {}).items():
        console.print(f"  prices.{term}: {price['amount']:g} {doc['currency']} per card-{term} "
                      f"(source: {escape(price['source'])}; as_of {price['as_of']})", soft_wrap=True)  # fmt: skip


def model_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per catalog architecture, with the parameter count (published, else computed)."""
    return [{"name": m.name, "params": m.total_params, "layers": m.layers, "hidden": m.hidden,
             "intermediate": m.intermediate, "heads": m.heads, "kv_heads": m.kv_heads, "vocab": m.vocab,
             "tied_embeddings": m.tied_embeddings, "experts": m.experts, "source": m.source}
            for m in sorted(catalog.models.values(), key=lambda m: (m.total_params, m.name))]  # fmt: skip


def model_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of :func:`model_rows` as a terminal table."""
    table = Table(title="Model architectures (L layers, h hidden, I SwiGLU width, a/kv heads, V vocabulary)",
                  show_edge=False)  # fmt: skip
    table.add_column("name", no_wrap=True, min_width=max((len(r["name"]) for r in rows), default=4))
    for col in ("params", "L", "h", "I", "a/kv", "V", "tied"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(r["name"], f"{r['params'] / 1e9:,.2f} B", str(r["layers"]), str(r["hidden"]),
                      str(r["intermediate"]), f"{r['heads']}/{r['kv_heads']}", str(r["vocab"]),
                      "yes" if r["tied_embeddings"] else "no")  # fmt: skip
    return table


def validate_line(counts: CatalogCounts) -> str:
    """``ftopt catalog validate``'s success line."""
    return (f"ok: {counts.files} file{'s' if counts.files != 1 else ''}: {counts.gpus} gpus, {counts.offers} offers, "
            f"{counts.models} models, {counts.fx_rates} fx rates")  # fmt: skip

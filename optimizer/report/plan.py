"""Rendering: terminal tables (rich), JSON documents, atomic file writes. No modelling happens here."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from optimizer.inputs.atomic import write_atomic
from optimizer.inputs.schema_plan import Estimate
from optimizer.inputs.terminal import escape
from optimizer.launch import exporters
from optimizer.models.coverage import NO_P2P, NO_RUN, WORST_RUN, above_text
from optimizer.report.measure import calibration_lines
from optimizer.report.offer import renting_lines
from optimizer.solve.explain import Relaxation
from optimizer.solve.planner import NO_PLAN_WHY, SolveResult

__all__ = ["write_atomic"]  # re-exported for the CLI

GIB = 2**30
MEMORY_ROWS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")


def estimate_json(est: Estimate) -> dict[str, Any]:
    """The docs/json-contract.md document: status, plan, memory, time, cost (and model, notes, uncertainty)."""
    return est.model_dump(mode="json")


def solve_json(result: SolveResult) -> dict[str, Any]:
    """JSON of a solve: the contract's five keys, plus ``explanation`` when infeasible.

    With ``--top N`` (N > 1) and a plan, ``next_best`` lists the next best plans #2..#N (top_json); without it
    the document is the plain one, key for key.
    """
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
            **alternatives_json(r),
        }
    if result.trade_off is not None:
        doc["trade_off"] = result.trade_off
    if result.relaxation is None:  # with a plan: the what-if hint, null when there is none
        doc["hint"] = result.hint
    if result.best.status.value == "feasible" and result.bound is not None:  # stopped by --time-limit
        objective = result.scenario.objective.value
        doc["bound"] = {"objective": objective, "value": result.bound,
                        "unit": result.currency if objective == "cost" else "hours"}  # fmt: skip
    if result.searched is not None:  # the time limit cut the build short: the plan is the best of the offers seen
        doc["cut_short"] = {"offers_searched": result.searched[0], "offers": result.searched[1],
                            "text": cut_short_text(result.searched)}  # fmt: skip
    next_best = top_json(result)
    if next_best is not None:
        doc["next_best"] = next_best
    return doc


def top_json(result: SolveResult) -> list[dict[str, Any]] | None:
    """The next best plans #2..#N that ``--top N`` lists, each a plan document as the best one; None without them.

    None (the key left out) when --top asked for one plan or the scenario has none; an empty list when --top asked
    for more but no other plan meets the scenario's limits. The order is the text's: #2 first.
    """
    if result.top_k <= 1 or result.relaxation is not None:
        return None
    return [estimate_json(est) for est in result.top[1:]]


def cut_short_text(searched: tuple[int, int]) -> str:
    """What a search cut short by the time limit covered, in words.

    E.g. 'the time limit cut the search short after 40 of 300 offers; the best plan among them, not proven optimal'.
    """
    return (f"the time limit cut the search short after {searched[0]:,} of {searched[1]:,} offers; the best plan "
            "among them, not proven optimal")


def alternatives_json(r: Relaxation) -> dict[str, Any]:
    """Every single change that gives a plan, and the budget/deadline front when both bind (docs/json-contract.md)."""
    return {"relaxations": [{"field": o.field, "value": o.value, "text": o.text} for o in r.options],
            "tradeoff": [{"cost": c, "hours": h} for c, h in r.tradeoff]}  # fmt: skip


def dumps(doc: Any) -> str:
    """Canonical JSON text: sorted keys off (contract order), fixed separators, trailing newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def launch_text(settings: dict[str, Any]) -> str:
    """The launch settings as indented YAML."""
    return exporters.yaml_text(settings)


def launch_files(settings: dict[str, Any]) -> dict[str, str]:
    """File name -> text for ``--launch-dir``: launch.yaml and each registered exporter's file (launch/exporters.py)."""
    return exporters.render(settings)


def console() -> Console:
    """A console for stdout: the terminal's width, or 120 columns when output goes to a file or a pipe."""
    out = Console()
    return out if out.is_terminal else Console(width=120)


_SECONDS = {"minute": 60, "second": 1}


def _units(term: str, count: int) -> str:
    """'3 days', or for per-minute/per-second billing the count with its hours: '212,270 s (58.96 h)'."""
    if term in _SECONDS:
        return f"{count:,} {'min' if term == 'minute' else 's'} ({count * _SECONDS[term] / 3600:,.2f} h)"
    return f"{count:,} {term}{'s' if count != 1 else ''}"


_PRICE_OF = {"second": "hourly price billed per second", "minute": "hourly price billed per minute",
             "hour": "hourly price", "day": "daily price", "week": "weekly price", "month": "monthly price"}


def billing_basis(term: str) -> str:
    """What a plan's ``term`` means in words: 'hourly price billed per second', 'monthly price + hourly price'."""
    return " + ".join(_PRICE_OF.get(t, t) for t in term.split("+"))


def _gib(n: float, decimals: int = 1) -> str:
    """Bytes as GiB with thousands separators: '1,577.0 GiB' (``decimals`` after the point)."""
    return f"{n / GIB:,.{decimals}f} GiB"


def rented_units(cards: int, gpu: str, offer: Any) -> str:
    """What is rented: '2 x (8 x H100-SXM) instances' on an instance offer, else '16 x H100-SXM'."""
    per = getattr(offer, "cards_per_instance", None) if offer is not None else None
    if getattr(offer, "sold_as", "card") == "instance" and per:
        n = cards // per
        return f"{n} x ({per} x {gpu}) instance{'s' if n != 1 else ''}"
    return f"{cards} x {gpu}"


def _plan_line(est: Estimate) -> str:
    p = est.plan
    assert p is not None
    return (
        f"{rented_units(p.cards, p.gpu, est.offer)} ({p.nodes} node{'s' if p.nodes > 1 else ''}, offer {p.offer}); "
        f"tp={p.tp} pp={p.pp}"
        + (f" (interleaved, {p.virtual_pipeline} chunks per stage)" if p.virtual_pipeline > 1 else "")
        + f" dp={p.dp}; ZeRO-{p.zero_stage}"
        + (f" hybrid (sharded over the {p.shard_group} ranks of each node, {p.dp // p.shard_group} replicas)"
           if p.shard_group is not None else "")  # fmt: skip
        + f" offload={p.offload.value}; micro_batch={p.micro_batch} "
        f"grad_accum={p.grad_accum}; {p.precision.value}; {p.optimizer.value}; checkpointing={p.checkpointing.value}"
        + (f"; attention={p.attention.value}" if p.attention else "")
    )


def memory_table(est: Estimate) -> Table:
    """Per-GPU memory breakdown against capacity."""
    m = est.memory
    assert m is not None
    table = Table(title="Per-GPU memory", show_edge=False)
    table.add_column("component")
    table.add_column("per GPU", justify="right")  # the figures are GiB, each with its unit
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
    units = ", ".join(_units(k, v) for k, v in p.billed_units.items())
    fits = memory_verdict(est.memory.fits, est.memory.host_ram_fits, est.memory.host_ram_needed,
                          est.offer.host_ram_bytes if est.offer is not None else None, est.memory.host_ram_limit,
                          est.memory.cpu_offload)  # fmt: skip
    return [
        *model_lines(est),
        f"[bold]Plan[/bold] ({est.status.value}): {escape(_plan_line(est))}",
        *offer_lines(est),
        memory_table(est),
        f"Memory: {fits} Time: {t.hours:,.1f} h wall clock{_wall_clock_parts(t)}, {t.steps:,} steps of "
        f"{t.step_seconds:.2f} s, "
        f"{t.tokens_per_second:,.0f} tokens/s, MFU {100 * t.mfu:.1f}%"
        + (f", HFU {100 * t.hfu:.1f}%" if t.hfu is not None else ""),
        f"Cost: {c.total:,.2f} {c.currency}"
        + (f" (= {c.budget_currency_total:,.2f} {c.budget_currency or 'in budget currency'})"
           if c.budget_currency_total is not None else "")
        + f"; {billing_basis(p.term)}: {units} per card x {p.cards} card{'s' if p.cards > 1 else ''}"
        + _instance_bill(est),
        *uncertainty_lines(est),
        *calibration_lines(est),
        *(escape(line) for line in renting_lines(est)),
    ]


def memory_verdict(fits: bool, host_ok: bool | None, need: int | None, have: int | None, limit: int | None = None,
                   offload: int = 0) -> str:  # fmt: skip
    """The memory verdict naming what fails: the card, the node's host RAM (or the scenario's cap on it), or both.

    'fits.', 'DOES NOT FIT on the GPU.', 'fits on the GPU; host RAM does NOT: 1,609 GiB needed per node, 238 GiB
    on the node.' A plan needs both; a verdict naming only the card would blame it for a node's RAM. With ``limit``
    (allow.max_host_memory_gib, in bytes, when the offload is over it) the cap is named, not the node's RAM, which
    may well hold it: '... 1,577 GiB offloaded per node, over allow.max_host_memory_gib (500 GiB)'.
    """
    if host_ok is not False:
        return "fits." if fits else "DOES NOT FIT on the GPU."
    if limit is not None:
        ram = f"{_gib(offload, 0)} offloaded per node, over allow.max_host_memory_gib ({_gib(limit, 0)})"
    else:
        ram = (f"{_gib(need or 0, 0)} needed per node, {_gib(have, 0)} on the node" if have is not None
               else f"{_gib(need or 0, 0)} needed per node")  # fmt: skip
    gpu = "fits on the GPU" if fits else "DOES NOT FIT on the GPU"
    return f"{gpu}; host RAM does NOT{' either' if not fits else ''}: {ram}."


def _wall_clock_parts(t: Any) -> str:
    """' (training 34.4 h + 1 checkpoint save 0.5 h + start-up 0.2 h + failures 0.1 h)', or '' without them."""
    if t.train_hours is None:
        return ""
    saves = f"{t.checkpoint_saves} checkpoint save{'s' if t.checkpoint_saves != 1 else ''}"
    parts = [f"training {t.train_hours:,.1f} h", f"{saves} {t.checkpoint_hours:,.1f} h",
             f"start-up {t.startup_hours:,.1f} h"]  # fmt: skip
    if t.interruption_hours >= 0.05:
        parts.append(f"restarts and lost work {t.interruption_hours:,.1f} h")
    return f" ({' + '.join(parts)})"


def _instance_bill(est: Estimate) -> str:
    """On an instance offer: the bill as the provider states it, instances x price per instance."""
    o, p = est.offer, est.plan
    if o is None or p is None or o.sold_as != "instance" or not o.cards_per_instance:
        return ""
    per = o.cards_per_instance
    prices = " + ".join(f"{b.amount * per:,.4g} {o.currency} per instance-{t}" for t, b in o.prices.items())
    return f" = {p.cards // per} whole instance{'s' if p.cards // per != 1 else ''} of {per} cards at {prices}"


def offer_lines(est: Estimate) -> list[str]:
    """Where to rent: provider, each billed price with its source and date, and the offer's notes (e.g. a range)."""
    o = est.offer
    if o is None:
        return []
    spot = " on spot capacity" if est.spot is not None else ""
    prices = "; ".join(f"{p.amount:g} {o.currency} per card-{term}{spot} (source: {p.source}; as of {p.as_of})"
                       for term, p in o.prices.items())  # fmt: skip
    lines = [f"Rent: {escape(o.id)} from {escape(o.provider)}: {escape(prices)}"]
    if o.notes:
        lines.append(f"  offer notes: {escape(o.notes)}")
    return lines


def model_lines(est: Estimate) -> list[str]:
    """The model as read (so an import can be checked) and what ftopt assumed reading the scenario."""
    m = est.model
    lines = []
    if m is not None:
        lines.append(f"Model: {escape(m.name)}, {m.params / 1e9:,.2f} B parameters; L={m.layers} h={m.hidden} "
                     f"I={m.intermediate} heads={m.heads}/{m.kv_heads} head_dim={m.head_dim} V={m.vocab:,}"
                     f"{' tied' if m.tied_embeddings else ''}")  # fmt: skip
    return lines + [f"Note: {escape(n)}" for n in est.notes]


def uncertainty_lines(est: Estimate) -> list[str]:
    """The plan at the 10th and 90th percentile of the models' held-out errors, and whether it still holds."""
    u, m = est.uncertainty, est.memory
    if u is None or m is None:
        return []
    um, ut, uc = u.memory, u.time, u.cost
    risk = u.risk
    if um.fits_p90:
        memory = "fits at the high end too"
    elif m.fits and risk is not None and risk.level == "p50":  # the median fits, the high end does not
        memory = "over the usable memory at the high end (risk: p90 in the scenario makes every plan allow for it)"
    else:
        memory = "over the usable memory at the high end"
    if risk is not None:
        within = "within" if risk.total_at_risk <= risk.usable else "OVER"
        memory += (f"; planned at risk {risk.level}: peak x {risk.memory_ratio:g} = {_gib(risk.total_at_risk)} "
                   f"{within} {_gib(risk.usable)}")
    holds = [f"{name} {'met' if ok else 'MISSED'}" for name, ok in
             (("deadline", ut.meets_deadline_p90), ("budget", uc.within_budget_p90)) if ok is not None]  # fmt: skip
    missed = any("MISSED" in h for h in holds) and risk is not None and "deadline" not in risk.applies_to
    hint = "; risk_limits: true chooses a plan that holds the deadline and budget there" if missed else ""
    return [
        f"Uncertainty (10th-90th percentile of measured/predicted on {um.cases} + {ut.cases} held-out cases): "
        f"peak {_gib(um.total_p10)} to {_gib(um.total_p90)}, {memory}",
        f"  time {ut.hours_p10:,.1f}-{ut.hours_p90:,.1f} h, cost {uc.total_p10:,.2f}-{uc.total_p90:,.2f} {uc.currency}"
        + (f"; at the slow end: {', '.join(holds)}{hint}" if holds else ""),
    ] + ([f"  time: {NO_RUN}"] if ut.published_run_like_this is False else []) + (
        [f"  time: {NO_P2P}"] if ut.no_peer_to_peer else []) + (
        [f"  time: {above_text(ut.published_run_like_this, est.time.hfu, ut.best_published_hfu)}"]
        if ut.above_published_runs and est.time is not None and est.time.hfu is not None else []) + (
        [f"  memory: {NO_RUN}"] if um.published_run_like_this is False else []) + (
        [f"  memory: {WORST_RUN.format(ratio=um.worst_run_like_this.ratio, case=um.worst_run_like_this.case)}"]
        if um.worst_run_like_this is not None else [])


def alternatives_table(result: SolveResult) -> Table:
    """The best plan on each other GPU type, for comparison."""
    table = Table(title="Best plan on each other GPU type", show_edge=False)
    for col in ("gpu", "cards", "layout", "hours", "cost", "per-GPU memory"):
        table.add_column(col, justify="right" if col not in ("gpu", "layout") else "left")
    for est in sorted(result.alternatives, key=lambda e: (_cost(e), e.plan.gpu if e.plan else "")):
        p, m, t = est.plan, est.memory, est.time
        assert p is not None and m is not None and t is not None
        layout = f"tp{p.tp} dp{p.dp} Z{p.zero_stage}/{p.offload.value} mb{p.micro_batch} ck={p.checkpointing.value}"
        table.add_row(
            escape(p.gpu),
            str(p.cards),
            layout,
            f"{t.hours:,.1f}",
            money_text(est),
            f"{_gib(m.total)} / {_gib(m.capacity)}",
        )
    return table


def money_text(est: Estimate) -> str:
    """A plan's bill as its Cost line writes it: '1,124.12 USD (= 7,608.69 CNY)', or '10,998.27 CNY'.

    The offer's currency first and the report currency beside it when they differ, so a plan and the plans it is
    compared with read in the same currencies.
    """
    c = est.cost
    assert c is not None
    return money_pair(c.total, c.currency, c.budget_currency_total, c.budget_currency)


def money_pair(total: float, currency: str, budget_total: float | None, budget_currency: str | None) -> str:
    """'1,124.12 USD (= 7,608.69 CNY)', or '10,998.27 CNY' without a second currency (text and HTML alike)."""
    if budget_total is None:
        return f"{total:,.2f} {currency}"
    return f"{total:,.2f} {currency} (= {budget_total:,.2f} {budget_currency or ''})"


def no_plan_text(no_plan: list[tuple[str, str]] | None) -> str | None:
    """'No plan on the other allowed GPU types: A800-80G, H20, H800 (configurations that fit ...)', reasons grouped."""
    if not no_plan:
        return None
    groups: dict[str, list[str]] = {}
    for gpu, why in no_plan:
        groups.setdefault(why, []).append(gpu)
    parts = [f"{', '.join(gpus)} ({NO_PLAN_WHY[why]})" for why, gpus in groups.items()]
    return f"No plan on the other allowed GPU types: {'; '.join(parts)}"


def _cost(est: Estimate) -> float:
    c = est.cost
    assert c is not None
    return c.budget_currency_total if c.budget_currency_total is not None else c.total


def bound_text(value: float, currency: str, sc: Any) -> str:
    """A proven lower bound written like the figure it bounds, rounded down: '7,608.69 CNY' or '35.2 h'.

    Hours to a tenth, as the wall clock is printed (planner.bound_value has already rounded it down).
    """
    if sc.objective.value == "cost":
        return f"{value:,.2f} {currency}"
    return f"{math.floor(value * 10 + 1e-9) / 10:,.1f} h"


def print_solve(result: SolveResult, console: Console) -> None:
    """Human-readable solve result."""
    sc = result.scenario
    console.print(
        f"[bold]{escape(sc.name)}[/bold]: {sc.method.value} fine-tuning, objective {sc.objective.value}, "
        f"{result.candidates} candidate plans after pruning ({result.enumerated:,} configurations evaluated)"
    )
    if result.relaxation is not None:
        console.print(f"[bold red]Infeasible[/bold red]: {escape(result.relaxation.message)}")
        return
    for item in estimate_lines(result.best):
        console.print(item)
    if result.searched is not None:
        proof = cut_short_text(result.searched)
    elif result.best.status.value == "optimal":
        proof = "proven optimal by CP-SAT"
    else:
        proof = f"best found within the time limit; proven bound {bound_text(result.bound, result.currency, sc)}"
    console.print(f"Optimality: {proof}")
    if result.trade_off and result.trade_off["text"]:
        console.print(f"Trade-off: {escape(result.trade_off['text'])}")
    if result.hint:
        console.print(f"Hint: {escape(result.hint['text'])}")
    for i, est in enumerate(result.top[1:], start=2):
        console.print(f"#{i}: {escape(_plan_line(est))}; {est.time.hours:,.1f} h; {money_text(est)}")  # type: ignore[union-attr]
    if result.launch:
        console.print("[bold]Launch settings[/bold] (write them with --launch-dir):")
        console.print(escape(launch_text(result.launch)), highlight=False)
    if result.alternatives:
        console.print(alternatives_table(result))
    missing = no_plan_text(result.no_plan)
    if missing:
        console.print(escape(missing))


def print_estimate(est: Estimate, console: Console) -> None:
    """Human-readable single estimate."""
    for item in estimate_lines(est):
        console.print(item)

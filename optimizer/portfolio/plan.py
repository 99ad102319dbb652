"""From a portfolio file to a schedule: load the jobs' candidate spaces, build the Problem, solve, account.

For each job the scenario's candidate space (space.py) is evaluated on the portfolio's rental offers plus one
offer-like entry per owned machine and per buy option (same GPU spec, all cards in one node; not billed: those
cards cost electricity and capital instead). The scenario's budget, deadline_hours, catalog and pinned term are
replaced by the portfolio's release and due days, total cost, catalog and block terms; its allow-lists
(gpus, providers for rentals, max_cards, max_nodes) and other plan pins still apply.

Accounting (the figures reported, recomputed from the parts in plain floats): rent = sum over rentals of
cards x sum over terms of units x price (x exchange rate); capital = sum over buy options of cards bought x price x
(1 - resale_fraction) x horizon_days / (365 x life_years); power = sum over runs on owned or bought cards of
cards x hours x power_w / 1000 x electricity_per_kwh. Break-even utilisation of a buy option (the seeds' "buy above
about 40 hours a week", for this team's prices): capital per card and week c_w = price x (1 - resale) x 7 /
(365 x life_years) is repaid when h x (p - e) >= c_w, h hours per week, p the cheapest hourly rental of the GPU
in the catalog, e the card's electricity per hour; so h* = c_w / (p - e) (null when no offer rents the GPU by the
hour or rent does not exceed electricity).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.inputs.catalog import Catalog, load_catalog, load_scenario, resolve_model, resolve_offer_file
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Status, Term
from optimizer.inputs.schema_catalog import Host, Offer, Price
from optimizer.inputs.schema_portfolio import Portfolio
from optimizer.inputs.yamlio import read_yaml, validate
from optimizer.models import cost
from optimizer.portfolio.schedule import (
    DEFAULT_SETTINGS,
    Occurrence,
    Pool,
    Problem,
    Rental,
    Run,
    Schedule,
    Settings,
    solve,
)
from optimizer.solve.explain import pin_problem
from optimizer.solve.limits import REGISTRY, admits
from optimizer.solve.planner import canonical_allow, to_estimate
from optimizer.solve.space import Space, enumerate_all, prune, ram_short_summary

DAY_S = 86_400
YEAR_DAYS = 365  # life_years x 365 days: the write-off period in the capital share
_UNIT_S = {"month": 720 * 3600, "week": 168 * 3600, "day": 86_400, "hour": 3600, "minute": 60, "second": 1}


@dataclass
class JobSpace:
    """One job's pruned candidates: the space (for plan details) and its runs before windows are applied."""

    name: str
    space: Space
    runs: list[Run]


@dataclass
class PortfolioResult:
    """The answer to ``ftopt portfolio``: the schedule in plain values (report_portfolio renders it)."""

    name: str
    currency: str
    horizon_days: int
    status: str
    bound: float | None
    cost: dict[str, Any]
    purchases: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    rentals: list[dict[str, Any]]
    utilisation: list[dict[str, Any]]
    break_even: list[dict[str, Any]]
    message: str | None = None


def load_portfolio(path: str | Path) -> Portfolio:
    """Read and validate a portfolio file; the name defaults to the file's stem."""
    pf = validate(Portfolio, read_yaml(path), str(path))
    return pf if pf.name is not None else pf.model_copy(update={"name": Path(path).stem})


def _scenario_file(name: str, base: Path, source: str, where: str) -> Path:
    """A job's scenario: absolute, else relative to the portfolio's folder, else to the working directory."""
    p = Path(name)
    found = next((c for c in ([p] if p.is_absolute() else [base / p, p]) if c.is_file()), None)
    if found is None:
        raise InputError(source, where, f"scenario file '{name}' not found (relative paths are read from the "
                         "portfolio's folder, then the working directory)")  # fmt: skip
    return found


def _pool_offer(key: str, gpu: str, cards: int, currency: str, ram_gib: float | None = None) -> Offer:
    """Owned or bought cards as an offer-like entry for the space (one node, GPU defaults, never billed).

    Its host RAM is ``ram_gib`` (the portfolio's ``host_ram_gib``); unset, the space applies the calibration's
    default rule per card (hosts.py), as for an offer that does not state its RAM.
    """
    host = None if ram_gib is None else Host.model_construct(ram_gib=ram_gib, ram_gib_per_card=None, vcpus=None,
                                                             local_disk_gb=None, local_disk_kind=None,
                                                             network_gb_per_s=None, source="portfolio host_ram_gib",
                                                             as_of=None)  # fmt: skip
    return Offer.model_construct(id=key, provider=key.split("-")[0], gpu=gpu, cards_per_node=cards, max_nodes=1,
                                 inter_node_gb_per_s=None, nvlink=True, hour_increment_s=3600, prices={},
                                 notes=None, currency=currency, host=host, sold_as="card",
                                 cards_per_instance=None)  # fmt: skip


def _allowed(space: Space, rows: np.ndarray, sc: Any, gpus: list[str] | None) -> np.ndarray:
    """Rows the registry's portfolio limits admit (rentals_only limits skip owned and bought cards: no prices)."""
    c = space.cand
    pool = np.array([not space.offers[int(c.offer_idx[r])].prices for r in rows], dtype=bool)
    ok = np.ones(rows.size, dtype=bool)
    for spec in REGISTRY:
        if spec.in_portfolio and spec.kind != "space":
            ok &= admits(space, spec, spec.read(sc, gpus), rows, pool if spec.rentals_only else None)
    return rows[ok]


def _fewer_cards_win(space: Space, rows: np.ndarray) -> np.ndarray:
    """Drop a card count when fewer cards on the same offer or pool run at least as fast (exact dominance)."""
    c = space.cand
    keep = []
    for oi in sorted(set(int(x) for x in c.offer_idx[rows])):
        mine = sorted((int(c.cards[r]), float(c.time["hours"][r]), int(r)) for r in rows if c.offer_idx[r] == oi)
        best = math.inf
        for _, hours, r in mine:
            if hours < best:
                keep.append(r)
                best = hours
    return np.array(sorted(keep), dtype=np.int64)


def _durations(hours: np.ndarray, grid_s: int) -> np.ndarray:
    return np.ceil(np.round(hours * 3600.0 / grid_s, 6)).astype(np.int64)


def job_space(path: Path, catalog: Catalog, pools: list[tuple[Offer, float]], pf: Portfolio, grid_s: int,
              label: str) -> JobSpace:  # fmt: skip
    """The job's candidates on rentals and pools, pruned, with durations, solo bills and electricity.

    A scenario whose ``plan:`` pins admit no configuration on any offer or pool (tp not dividing the heads, a
    global batch the pinned cards cannot split) is an InputError naming the scenario file and the pinned field
    (explain.pin_problem), not a job without a plan: the scenario contradicts itself whatever the calendar.
    """
    source = str(path)
    sc = load_scenario(path)
    plan = sc.plan.model_copy(update={"term": None}) if getattr(sc.plan, "term", None) else sc.plan
    sc = sc.model_copy(update={"budget": None, "deadline_hours": None, "catalog": None, "plan": plan})
    both = dataclasses.replace(catalog, offers=[*catalog.offers, *(o for o, _ in pools)])
    arch = resolve_model(sc, both, path)
    job, offers, gpus, ev = enumerate_all(sc, both, arch, source)
    if len(ev) == 0:  # the pins admit no configuration: the scenario's own one-line error, as ftopt solve gives
        raise InputError(source, *pin_problem(sc, arch, offers, gpus))
    # pins may drop offers: map the kept offers back to rentals (first n_rentals) and pools
    fx = [_rate(catalog, o.currency, pf.currency, label) if o.prices else 1.0 for o in offers]
    short = ram_short_summary(ev, offers, both.calibration.get("hosts", {}), sc.allow.max_host_memory_gib)
    space = Space(job, sc, offers, gpus, pf.currency, fx, ev, np.zeros(len(ev)), [], len(ev), int(ev.fits.sum()),
                  accuracy={}, ram_short=short)  # fmt: skip
    rows = _fewer_cards_win(space, _allowed(space, prune(ev), sc, canonical_allow(sc, both, source)))
    space.cand = ev.take(rows)
    c = space.cand
    durations = _durations(c.time["hours"], grid_s)
    runs: list[Run] = []
    bills: list[cost.Bill] = []
    pool_ids = {o.id: q for q, (o, _) in enumerate(pools)}
    rental_ids = {o.id: f for f, o in enumerate(catalog.offers)}
    for i in range(len(c)):
        offer = offers[int(c.offer_idx[i])]
        cards, hours = int(c.cards[i]), float(c.time["hours"][i])
        if offer.id in pool_ids:
            q = pool_ids[offer.id]
            energy = cards * hours * pools[q][1] / 1000.0 * (pf.electricity_per_kwh or 0.0)
            runs.append(Run("pool", q, cards, int(durations[i]), hours, energy, i))
            bills.append(cost.Bill(0.0, {}))
            continue
        b = cost.bill(int(durations[i]) * grid_s / 3600.0, offer)
        bills.append(b)
        rate = fx[int(c.offer_idx[i])]
        runs.append(Run("rent", rental_ids[offer.id], cards, int(durations[i]), hours, b.per_card * cards * rate, i))
    space.bills = bills
    space.cost_total = np.array([r.cost for r in runs])
    return JobSpace(sc.name or path.stem, space, runs)


def _rate(catalog: Catalog, base: str, quote: str, label: str) -> float:
    """Exchange rate from an offer's currency to the portfolio's; a missing rate names the portfolio's currency."""
    found = catalog.rate(base, quote)
    if found is None:
        raise InputError(label, "currency", f"no exchange rate {base}->{quote} in catalogs/fx.yaml for the {base} "
                         f"offers; add one or use a {base} portfolio")  # fmt: skip
    return float(found.rate)


def _rentals(catalog: Catalog, currency: str, label: str, sizes: dict[int, set[int]]) -> list[Rental]:
    out = []
    for f, o in enumerate(catalog.offers):
        rate = _rate(catalog, o.currency, currency, label)
        prices = {t.value: p.amount * rate for t, p in o.prices.items()}
        out.append(Rental(o.id, o.gpu, prices, o.hour_increment_s, tuple(sorted(sizes.get(f, set())))))
    return out


def build_problem(path: str | Path, grid_s: int = 1) -> tuple[Portfolio, Catalog, Problem, list[JobSpace], list]:
    """Load the portfolio and every job's space; return the Problem and what reporting needs."""
    source = str(path)
    pf = load_portfolio(path)
    base = Path(path).parent
    names = [pf.catalog] if isinstance(pf.catalog, str) else (pf.catalog or [])
    files = [resolve_offer_file(n, source, "catalog", base) for n in names] or None
    catalog = load_catalog(files)
    pools: list[tuple[Offer, float]] = []
    pool_info: list[Pool] = []
    for i, own in enumerate(pf.owned):
        gpu = catalog.gpu_id(own.gpu, source, f"owned[{i}].gpu")
        pools.append((_pool_offer(f"owned-{i}", gpu, own.cards, pf.currency, own.host_ram_gib), own.power_w))
        pool_info.append(Pool(gpu, True, own.cards, 0.0))
    for i, opt in enumerate(pf.buy):
        gpu = catalog.gpu_id(opt.gpu, source, f"buy[{i}].gpu")
        pools.append((_pool_offer(f"bought-{i}", gpu, opt.max_cards, pf.currency, opt.host_ram_gib), opt.power_w))
        share = opt.price * (1.0 - opt.resale_fraction) * pf.horizon_days / (YEAR_DAYS * opt.life_years)
        pool_info.append(Pool(gpu, False, opt.max_cards, share))
    by_file: dict[Path, JobSpace] = {}  # jobs naming the same scenario share its space
    spaces = []
    for i, j in enumerate(pf.jobs):
        scenario = _scenario_file(j.scenario, base, source, f"jobs[{i}].scenario")
        if scenario.resolve() not in by_file:
            by_file[scenario.resolve()] = job_space(scenario, catalog, pools, pf, grid_s, source)
        spaces.append(by_file[scenario.resolve()])
    occurrences: list[Occurrence] = []
    sizes: dict[int, set[int]] = {}
    labels = []
    for ji, (job, js) in enumerate(zip(pf.jobs, spaces, strict=True)):
        for k in range(job.occurrences):
            lo, hi = job.window_days(k)
            release, due = math.ceil(round(lo * DAY_S / grid_s, 6)), math.floor(round(hi * DAY_S / grid_s, 6))
            runs = tuple(r for r in js.runs if r.duration <= due - release)
            occurrences.append(Occurrence(ji, k, release, due, runs))
            labels.append(f"{job.name}#{k}")
            for r in runs:
                if r.kind == "rent":
                    sizes.setdefault(r.where, set()).add(r.cards)
    problem = Problem(grid_s, pf.horizon_days * DAY_S // grid_s, tuple(occurrences), tuple(pool_info),
                      tuple(_rentals(catalog, pf.currency, source, sizes)))  # fmt: skip
    return pf, catalog, problem, spaces, labels


def block_cost(rental: Rental, cards: int, units: dict[str, int]) -> float:
    """Cards x sum over terms of units x price per card (hour, minute and second units at the hourly price)."""
    total = 0.0
    for term, n in units.items():
        price = rental.prices[term] if term in rental.prices else rental.prices[Term.hour.value] * _UNIT_S[term] / 3600
        total += n * price
    return cards * total


def _hourly_units(increments: int, inc_s: int) -> dict[str, int]:
    unit = {3600: "hour", 60: "minute", 1: "second"}.get(inc_s)
    return {unit: increments} if unit else {"second": increments * inc_s}


def _term(units: dict[str, int]) -> str:
    return "+".join(k for k in _UNIT_S if units.get(k)) or "none"


def break_even(pf: Portfolio, catalog: Catalog, problem: Problem) -> list[dict[str, Any]]:
    """Hours per week above which each buy option is cheaper than the cheapest hourly rental (module docstring)."""
    out = []
    for i, opt in enumerate(pf.buy):
        gpu = problem.pools[len(pf.owned) + i].gpu
        hourly = [r.prices[Term.hour.value] for r in problem.rentals if r.gpu == gpu and Term.hour.value in r.prices]
        weekly = opt.price * (1.0 - opt.resale_fraction) * 7.0 / (YEAR_DAYS * opt.life_years)
        power = opt.power_w / 1000.0 * (pf.electricity_per_kwh or 0.0)
        rent = min(hourly) if hourly else None
        hours = weekly / (rent - power) if rent is not None and rent > power else None
        out.append({"gpu": gpu, "hours_per_week": None if hours is None else round(hours, 3)})
    return out


def _account(pf: Portfolio, problem: Problem, spaces: list[JobSpace], labels: list[str], sched: Schedule
             ) -> tuple[list[dict], list[dict], dict[str, float]]:  # fmt: skip
    g = problem.grid_s
    jobs, rentals = [], []
    parts = {"rent": 0.0, "capital": 0.0, "power": 0.0}
    in_block = {j: b for b, block in enumerate(sched.blocks) for j in block.members}
    for j, occ in enumerate(problem.occurrences):
        run = occ.runs[sched.runs[j]]
        start_h = sched.starts[j] * g / 3600.0
        js = spaces[occ.job]
        plan = to_estimate(js.space, run.plan, Status.optimal).plan
        assert plan is not None
        entry = {"name": pf.jobs[occ.job].name, "occurrence": occ.index, "start_hours": round(start_h, 6),
                 "end_hours": round(start_h + run.hours, 6), "gpu": plan.gpu, "cards": run.cards}  # fmt: skip
        plan_doc = plan.model_dump(mode="json", exclude={"term", "billed_units"})
        if run.kind == "pool":
            pool = problem.pools[run.where]
            entry.update(where="owned" if pool.owned else "bought", offer=None, plan={**plan_doc, "offer": None})
            parts["power"] += run.cost
        else:
            entry.update(where="rented", offer=problem.rentals[run.where].offer, plan=plan_doc)
            if j not in in_block:  # a solo rental: its own block, billed as cost.py bills the run
                rental = problem.rentals[run.where]
                bill = cost.bill(run.duration * g / 3600.0, _offer_like(rental))
                rentals.append(_rental_doc(rental, run.cards, bill.units, start_h, start_h + run.duration * g / 3600,
                                           [labels[j]]))  # fmt: skip
        jobs.append(entry)
    for block in sched.blocks:
        rental = problem.rentals[block.rental]
        units = {t: n for t, n in block.units.items() if t != "increments"}
        units.update(_hourly_units(block.units.get("increments", 0), rental.increment_s) if
                     block.units.get("increments") else {})  # fmt: skip
        rentals.append(_rental_doc(rental, block.cards, units, block.start * g / 3600, block.end * g / 3600,
                                   [labels[j] for j in block.members]))  # fmt: skip
    rentals.sort(key=lambda r: (r["start_hours"], r["offer"], r["jobs"]))
    parts["rent"] = sum(r["_cost"] for r in rentals)
    for r in rentals:
        r.pop("_cost")
    parts["capital"] = sum(n * p.card_cost for n, p in zip(sched.bought, problem.pools, strict=True))
    return jobs, rentals, parts


def _offer_like(rental: Rental) -> Offer:
    """A rental's prices (already in the portfolio currency) as an offer for cost.bill."""
    prices = {Term(t): Price.model_construct(amount=a, source="", as_of=None) for t, a in rental.prices.items()}
    return Offer.model_construct(id=rental.offer, hour_increment_s=rental.increment_s, prices=prices)


def _rental_doc(rental: Rental, cards: int, units: dict[str, int], start_h: float, end_h: float,
                jobs: list[str]) -> dict[str, Any]:  # fmt: skip
    ordered = {k: units[k] for k in _UNIT_S if units.get(k)}
    return {"offer": rental.offer, "cards": cards, "term": _term(ordered), "units": ordered,
            "start_hours": round(start_h, 6), "end_hours": round(end_h, 6), "jobs": jobs,
            "_cost": block_cost(rental, cards, ordered)}  # fmt: skip


def _utilisation(pf: Portfolio, problem: Problem, sched: Schedule) -> list[dict[str, Any]]:
    out = []
    horizon_h = pf.horizon_days * 24.0
    for q, pool in enumerate(problem.pools):
        cards = pool.cards if pool.owned else sched.bought[q]
        busy = sum(occ.runs[r].cards * occ.runs[r].hours for occ, r in zip(problem.occurrences, sched.runs,
                   strict=True) if occ.runs[r].kind == "pool" and occ.runs[r].where == q)  # fmt: skip
        out.append({"gpu": pool.gpu, "where": "owned" if pool.owned else "bought", "cards": cards,
                    "busy_card_hours": round(busy, 3),
                    "utilisation": round(busy / (cards * horizon_h), 6) if cards else None})  # fmt: skip
    return out


def _run_place(problem: Problem, run: Run) -> str:
    """Where a run runs, in words: ``lambda-gpu_8x_h100 x8`` or ``owned RTX-4090 x1``."""
    if run.kind == "rent":
        return f"{problem.rentals[run.where].offer} x{run.cards}"
    pool = problem.pools[run.where]
    return f"{'owned' if pool.owned else 'bought'} {pool.gpu} x{run.cards}"


def infeasible_why(problem: Problem, spaces: list[JobSpace], labels: list[str]) -> str:
    """Why an infeasible portfolio has no schedule, leading with the limit that binds.

    The first occurrence without a run names it. When its job has plans but every one takes longer than the
    occurrence's window, the window binds: the message leads with the window's hours and the fastest plan's (as
    ``ftopt solve`` leads with "deadline too short"). When the job has no plan at all, memory binds (a plan that
    fits its cards and its nodes' host RAM); the host-RAM shortfall is added in either case when the space has one.
    With a run for every occurrence, the owned and buyable cards cannot carry what only they can run.
    """
    j = next((j for j, occ in enumerate(problem.occurrences) if not occ.runs), None)
    if j is None:
        return "the owned and buyable cards cannot carry the jobs that only they can run inside their windows"
    occ = problem.occurrences[j]
    runs = spaces[occ.job].runs
    if runs:
        fastest = min(runs, key=lambda r: (r.duration, r.hours))
        window_h = max(occ.due - occ.release, 0) * problem.grid_s / 3600.0
        why = (f"{labels[j]}: window too short: the fastest plan takes {fastest.hours:,.2f} h "
               f"({_run_place(problem, fastest)}) and the window from release to due is {window_h:,.2f} h")
    else:
        why = f"{labels[j]}: no plan fits in memory"
    short = spaces[occ.job].space.ram_short
    if short is not None:  # as solve's explanation says it (explain.ram_text): the closest of those rows
        which = "other configurations, which fit their cards," if runs else "configurations that fit their cards"
        why += (f"; {which} need more host RAM than their nodes have (the closest: "
                f"{short[0] / 2**30:,.0f} GiB per node on {short[1]}, whose node has {short[2] / 2**30:,.0f} GiB)")
    return why


def plan_portfolio(path: str | Path, settings: Settings = DEFAULT_SETTINGS, grid_s: int = 1) -> PortfolioResult:
    """Solve a portfolio file: the cheapest schedule of every job occurrence, with purchases and rentals."""
    pf, catalog, problem, spaces, labels = build_problem(path, grid_s)
    assert pf.name is not None
    be = break_even(pf, catalog, problem)
    empty = next((labels[j] for j, occ in enumerate(problem.occurrences) if not occ.runs), None)
    sched = solve(problem, settings) if empty is None else Schedule(Status.infeasible)
    if sched.status is Status.infeasible:
        why = infeasible_why(problem, spaces, labels)
        return PortfolioResult(pf.name, pf.currency, pf.horizon_days, "infeasible", None,
                               {"total": None, "currency": pf.currency, "rent": None, "capital": None, "power": None},
                               [], [], [], [], be, why)  # fmt: skip
    jobs, rentals, parts = _account(pf, problem, spaces, labels, sched)
    purchases = [
        {"gpu": p.gpu, "cards": n, "price": round(n * pf.buy[q - len(pf.owned)].price, 2)}
        for q, (p, n) in enumerate(zip(problem.pools, sched.bought, strict=True))
        if not p.owned and n
    ]
    money = {"total": round(float(sum(parts.values())), 2), "currency": pf.currency,
             **{k: round(float(v), 2) for k, v in parts.items()}}  # fmt: skip
    # the model rounds each coefficient up, so its bound may pass the exact total by those roundings
    bound = round(min(sched.bound, money["total"]), 2) if sched.bound is not None else None
    return PortfolioResult(pf.name, pf.currency, pf.horizon_days, sched.status.value, bound, money, purchases, jobs,
                           rentals, _utilisation(pf, problem, sched), be)  # fmt: skip

"""The portfolio problem as data, with what needs no solver: bounds, the sharing test and a greedy schedule.

portfolio.py states the formulation and builds the CP-SAT model over these types; the oracle test reads the same
types. Money is in the portfolio currency, time in grid units of ``Problem.grid_s`` seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from optimizer.inputs.schema import TERM_HOURS, Status, Term

MONEY = 10_000  # money units per unit of the portfolio currency (1/100 of a cent)
LONG_TERMS = (Term.month, Term.week, Term.day)


@dataclass(frozen=True)
class Run:
    """One way to run one occurrence: on a pool (``kind`` pool) or a rental offer (``kind`` rent)."""

    kind: str  # "pool" or "rent"
    where: int  # index into Problem.pools or Problem.rentals
    cards: int
    duration: int  # grid units, rounded up
    hours: float  # the time model's hours
    cost: float  # pool: electricity of the run; rent: its solo bill (cards x cheapest cover); portfolio currency
    plan: int  # the candidate's index in its job's space (for reporting)


@dataclass(frozen=True)
class Occurrence:
    """One repeat of one job, with its window in grid units and the runs that fit the window."""

    job: int
    index: int
    release: int
    due: int
    runs: tuple[Run, ...]


@dataclass(frozen=True)
class Pool:
    """Owned cards (``owned``, ``cards`` fixed) or a buy option (up to ``cards``, ``card_cost`` each)."""

    gpu: str
    owned: bool
    cards: int
    card_cost: float  # capital share of one bought card over the horizon; 0 for owned cards


@dataclass(frozen=True)
class Rental:
    """A rental offer as a billing rule: per-card prices of its terms (portfolio currency) and increment."""

    offer: str
    gpu: str
    prices: dict[str, float]  # term -> price per card and unit, converted to the portfolio currency
    increment_s: int
    sizes: tuple[int, ...]  # card counts a block may have

    @property
    def shareable(self) -> bool:
        """Jobs may share a block only when the offer has a day, week or month price (module docstring)."""
        return any(t.value in self.prices for t in LONG_TERMS)


@dataclass(frozen=True)
class Problem:
    """Everything the model reads."""

    grid_s: int
    horizon: int  # grid units
    occurrences: tuple[Occurrence, ...]
    pools: tuple[Pool, ...]
    rentals: tuple[Rental, ...]


@dataclass(frozen=True)
class Settings:
    """CP-SAT parameters and the cap on shared block slots per (offer, cards)."""

    time_limit_s: float = 60.0
    workers: int = 1
    seed: int = 0
    max_shared_blocks: int = 4


@dataclass(frozen=True)
class Block:
    """A rental in the answer: offer, cards, span (grid units), billed units and the occurrences it carries."""

    rental: int
    cards: int
    start: int
    end: int
    units: dict[str, int]
    members: tuple[int, ...]  # occurrence indices


@dataclass
class Schedule:
    """The answer: per occurrence its run and start, cards bought per pool, the rental blocks."""

    status: Status
    objective: float | None = None  # portfolio currency, from the model's rounded coefficients
    bound: float | None = None
    runs: list[int | None] = field(default_factory=list)  # per occurrence: index into its runs
    starts: list[int] = field(default_factory=list)
    bought: list[int] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)


def up(amount: float) -> int:
    """Money to whole money units, rounded up (tolerant to float noise)."""
    return int(math.ceil(round(amount * MONEY, 6)))


def solo_run(occ: Occurrence) -> int | None:
    """Index of the cheapest rental run of an occurrence (ties: shorter, then first), None without one."""
    rents = [(r.cost, r.duration, i) for i, r in enumerate(occ.runs) if r.kind == "rent"]
    return min(rents)[2] if rents else None


def sharing_can_pay(problem: Problem, f: int, size: int, eligible: list[int]) -> bool:
    """False when no block of ``size`` cards on rental ``f`` can cost less than renting its members alone.

    A block whose span lies in ((d - 1) days, d days] costs at least size x max(P_long, rate_f x 24 (d - 1)), P_long
    the offer's cheapest day/week/month unit and rate_f its cheapest price per card-hour; its members are eligible
    occurrences whose windows meet the span, so their solo rentals cost at most W(d) = the largest sum of s_j over
    the occurrences whose windows meet one span of d days. When W(d) <= that cost for every d, replacing any such
    block by solo rentals is no dearer, and the slots are left out (exact).
    """
    if len(eligible) < 2:
        return False
    rental = problem.rentals[f]
    long_price = min(rental.prices[t.value] for t in LONG_TERMS if t.value in rental.prices)
    rate = min(price / TERM_HOURS[Term(t)] for t, price in rental.prices.items())
    occ = [problem.occurrences[j] for j in eligible]
    solo = np.array([o.runs[solo_run(o)].cost for o in occ])
    release = np.array([o.release for o in occ], dtype=np.float64)
    due = np.array([o.due for o in occ], dtype=np.float64)
    day = 86_400 / problem.grid_s
    for d in range(1, int(math.ceil(problem.horizon / day)) + 1):
        span = d * day
        starts = release - span + 0.5  # the sum of window indicators peaks just after some left end
        meets = (release[None, :] < starts[:, None] + span) & (due[None, :] > starts[:, None])
        if float((meets * solo[None, :]).sum(axis=1).max()) > size * max(long_price, rate * 24 * (d - 1)):
            return True
    return False


def cover_price(rental: Rental, seconds: int) -> float:
    """Cheapest per-card bill covering ``seconds`` with the rental's terms (plain loops over long-term units)."""
    lengths = {t.value: TERM_HOURS[t] * 3600 for t in LONG_TERMS if t.value in rental.prices}
    best = math.inf
    limits = {t: -(-seconds // n) for t, n in lengths.items()}
    for months in range(limits.get("month", 0) + 1):
        for weeks in range(limits.get("week", 0) + 1):
            for days in range(limits.get("day", 0) + 1):
                counts = {"month": months, "week": weeks, "day": days}
                covered = sum(counts[t] * n for t, n in lengths.items())
                long = sum(counts[t] * rental.prices[t] for t in lengths)
                rest = max(0, seconds - covered)
                if rest and Term.hour.value not in rental.prices:
                    continue
                inc = rental.increment_s
                hourly = -(-rest // inc) * inc / 3600 * rental.prices.get(Term.hour.value, 0.0)
                best = min(best, long + hourly)
    return best


def lower_bound(problem: Problem) -> float:
    """A valid lower bound without search: each occurrence costs at least its cheapest way to run.

    Solo rental s_j, a pool run's electricity e_o (capital >= 0), or a shared run's share of its block, at least
    rate_f x k_o x hours (constraint (9)).
    """
    total = 0.0
    for occ in problem.occurrences:
        cheapest = math.inf
        for run in occ.runs:
            if run.kind == "pool":
                cheapest = min(cheapest, run.cost)
            else:
                rental = problem.rentals[run.where]
                rate = min(price / TERM_HOURS[Term(t)] for t, price in rental.prices.items())
                share = rate * run.cards * run.duration * problem.grid_s / 3600 if rental.shareable else run.cost
                cheapest = min(cheapest, share, run.cost)
        total += cheapest
    return total


MAX_PURCHASES = 256  # purchase vectors purchase_bound enumerates; beyond, it returns lower_bound()


def _outside(problem: Problem, occ: Occurrence) -> float:
    """The cheapest way to run ``occ`` off the pools: its solo rental, or a shared run's least share (cut (9))."""
    cheapest = math.inf
    for run in occ.runs:
        if run.kind == "rent":
            rental = problem.rentals[run.where]
            rate = min(price / TERM_HOURS[Term(t)] for t, price in rental.prices.items())
            share = rate * run.cards * run.duration * problem.grid_s / 3600 if rental.shareable else run.cost
            cheapest = min(cheapest, share, run.cost)
    return cheapest


def purchase_bound(problem: Problem) -> float:
    """A lower bound that counts the capital a pool run needs (lower_bound() counts only its electricity).

    For each purchase vector b (cards bought from each buy option; owned pools fixed):
        LB(b) = sum_q c_q b_q + sum_j r_j - max savings,
    where r_j is the cheapest way to run occurrence j off the pools (:func:`_outside`), and a pool run o of j on a
    pool with at least k_o cards saves d_o = r_j - e_o using card-time w_o = k_o p_o. The savings are bounded by a
    relaxation: the pools' capacities over time are summed into one card-time budget H sum_q cap_q, and occurrence j
    saves at most min(D_j, rho_j W_j) from the card-time W_j it gets, D_j = max_o d_o and rho_j = max_o d_o / w_o;
    the best split of the budget is then the fractional knapsack by rho_j. Every schedule buying b costs at least
    LB(b), so min_b LB(b) is a valid bound. With more than MAX_PURCHASES vectors, lower_bound() is returned.
    """
    buyable = [q for q, pool in enumerate(problem.pools) if not pool.owned]
    vectors = math.prod(problem.pools[q].cards + 1 for q in buyable)
    if vectors > MAX_PURCHASES:
        return lower_bound(problem)
    outside = [_outside(problem, occ) for occ in problem.occurrences]
    best = math.inf
    for choice in np.ndindex(*(problem.pools[q].cards + 1 for q in buyable)):
        bought = dict(zip(buyable, choice, strict=True))
        cap = [pool.cards if pool.owned else bought[q] for q, pool in enumerate(problem.pools)]
        capital = sum(problem.pools[q].card_cost * n for q, n in bought.items())
        items = []  # (rho_j, D_j) of occurrences a pool run makes cheaper
        total, budget = capital, float(problem.horizon) * sum(cap)
        for occ, r in zip(problem.occurrences, outside, strict=True):
            pooled = [run for run in occ.runs if run.kind == "pool" and run.cards <= cap[run.where]]
            if not math.isfinite(r):  # only pools can run it: its cheapest pool run, and the card-time it must use
                if not pooled:
                    total = math.inf
                    break
                total += min(run.cost for run in pooled)
                budget -= min(run.cards * run.duration for run in pooled)
                continue
            total += r
            gains = [(r - run.cost, max(run.cards * run.duration, 1)) for run in pooled if run.cost < r]
            if gains:
                items.append((max(d / w for d, w in gains), max(d for d, _ in gains)))
        if budget < 0:  # the runs only pools can take need more card-time than these pools have
            total = math.inf
        for rho, save in sorted(items, reverse=True):
            if budget <= 0 or not math.isfinite(total):
                break
            got = min(save, rho * budget)
            total -= got
            budget -= got / rho
        best = min(best, total)
    floor = lower_bound(problem)
    return max(best, floor) if math.isfinite(best) else floor


def plan_cost(problem: Problem, runs: list[int | None], bought: list[int]) -> float:
    """Capital of the cards bought plus each occurrence's run cost (solo bill or electricity); nothing shared."""
    total = sum(n * pool.card_cost for n, pool in zip(bought, problem.pools, strict=True))
    return total + sum(occ.runs[r].cost for occ, r in zip(problem.occurrences, runs, strict=True) if r is not None)


def _earliest(spans: list[tuple[int, int, int]], capacity: int, run: Run, occ: Occurrence) -> int | None:
    """Earliest start in the window where ``run`` fits beside ``spans`` (start, end, cards) on ``capacity`` cards."""
    for t in sorted({occ.release, *(e for _, e, _ in spans if occ.release <= e)}):
        if t + run.duration > occ.due:
            return None
        points = [t, *(s for s, _, _ in spans if t < s < t + run.duration)]
        if all(run.cards + sum(k for s, e, k in spans if s <= p < e) <= capacity for p in points):
            return t
    return None


def greedy(problem: Problem) -> tuple[list[int | None], list[int], list[int]] | None:
    """A cheap feasible schedule for the hint (nothing shared).

    For no purchase and for each count of cards of each buy option, occurrences in release order go to the cheaper
    of their solo rental and the earliest fitting pool run; the cheapest total is kept. None when some occurrence
    fits nowhere that way.
    """
    configs = [[0] * len(problem.pools)]
    for q, pool in enumerate(problem.pools):
        configs += [[m if i == q else 0 for i in range(len(problem.pools))] for m in range(1, pool.cards + 1)
                    if not pool.owned]  # fmt: skip
    best = None
    order = sorted(range(len(problem.occurrences)), key=lambda j: (problem.occurrences[j].release, j))
    for bought in configs:
        spans: dict[int, list[tuple[int, int, int]]] = {}
        runs: list[int | None] = [None] * len(problem.occurrences)
        starts = [occ.release for occ in problem.occurrences]
        for j in order:
            occ = problem.occurrences[j]
            solo = solo_run(occ)
            choice = (occ.runs[solo].cost, solo, occ.release) if solo is not None else None
            for o, run in enumerate(occ.runs):
                if run.kind != "pool" or (choice is not None and run.cost >= choice[0]):
                    continue
                pool = problem.pools[run.where]
                t = _earliest(spans.get(run.where, []), pool.cards if pool.owned else bought[run.where], run, occ)
                if t is not None:
                    choice = (run.cost, o, t)
            if choice is None:
                break
            runs[j], starts[j] = choice[1], choice[2]
            run = occ.runs[choice[1]]
            if run.kind == "pool":
                spans.setdefault(run.where, []).append((choice[2], choice[2] + run.duration, run.cards))
        else:
            cost = plan_cost(problem, runs, bought)
            if best is None or cost < best[0]:
                best = (cost, runs, starts, bought)
    return None if best is None else best[1:]
